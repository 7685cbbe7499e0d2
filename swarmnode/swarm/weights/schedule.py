"""Which chunk to ask which holder for next: a rarest-first queue over holders' have-maps.

Concurrent fetchers of one version ask the publisher for chunks no peer has yet and get the rest from each
other, so the publisher uploads about one copy, not one per fetcher.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import math
import time
from collections.abc import Iterable

from swarmnode.swarm.weights.havemap import bit, changed_bits


class ChunkSchedule:
    """The chunks still wanted, who holds which (holders' have-maps), and which holder not to ask for what.

    A holder is asked only for chunks its latest have-map shows, rarest first (fewest known holders, then this
    fetcher's random order), and a publisher (`seeds`) only for chunks no other live holder shows, so the
    publisher's upload goes to chunks no peer has yet and peers serve the rest (a fetch that starts after others
    finished takes the version from them, not a share from the publisher).
    A holder that failed a chunk (bad hash, broken stream) is not asked for it again this round; one that
    answered "not yet" is asked again after `MISS_RETRY_S`.

    Scales to manifests of many thousand chunks: each holder has a heap of the pending chunks it holds, keyed
    by rarity, whose stale entries (chunk taken elsewhere, rarity changed) are dropped or re-keyed when they
    surface, so a take costs O(log n) and a have-map update O(chunks it changed), not O(n) per request.
    """

    MISS_RETRY_S = 0.3
    SEED_WAIT_S = 1.0  # a publisher waits this long at most for the other holders' have-maps
    HAVE_REFRESH_S = 0.05

    def __init__(
        self,
        indices: Iterable[int],
        holders: list[str],
        max_failures: int,
        n_chunks: int,
        incoming: set[int] | None = None,
        seeds: Iterable[str] = (),
    ):
        self.pending: dict[int, int] = {i: rank for rank, i in enumerate(indices)}  # chunk -> random rank
        self.rank = dict(self.pending)
        self.in_flight = 0
        self.failed: set[int] = set()
        self.failures: collections.Counter[int] = collections.Counter()
        self.misses: collections.Counter[int] = collections.Counter()
        self.excluded: dict[int, dict[str, float]] = collections.defaultdict(dict)  # chunk -> holder -> until
        self.holders = set(holders)
        self.seeds = set(seeds) & self.holders  # publishers: asked only for chunks no other live holder shows
        self.lost: set[str] = set()  # holders that failed (stalled, broke the stream): not asked again
        self.max_failures = max_failures
        self.max_misses = 100 * max(1, len(holders))
        self.n_chunks = n_chunks
        self.have: dict[str, bytes] = {}  # holder -> bitmap of chunks it holds (absent: not known yet)
        self.coming: dict[str, bytes] = {}  # holder -> bitmap of chunks on their way to it
        self.held_count: dict[str, int] = {}
        self.count = [0] * n_chunks  # known holders per chunk, counting those it is on its way to
        self.heaps: dict[str, list[tuple[int, int, int]]] = {}  # holder -> (count, rank, chunk) it holds
        self.incoming = incoming if incoming is not None else set()  # ours, in flight (advertised to others)
        self.have_asked: dict[str, float] = {}  # holder -> when its have-map was last requested
        self.last_progress = self.started = time.monotonic()  # a chunk arrived or a holder gained one
        self.changed = asyncio.Event()
        self.seed_taken = 0  # chunks asked of a publisher
        self.seed_taken_unheard = 0  # of those, asked while a live holder had not yet said what it has

    def finished(self) -> bool:
        return not self.pending and not self.in_flight

    def can_help(self, holder: str) -> bool:
        """Whether some pending chunk may still come from `holder` (now or after a miss expires)."""
        blocked = sum(1 for i, until in self.excluded.items() if i in self.pending and until.get(holder) == math.inf)
        return len(self.pending) > blocked

    def complete(self, holder: str) -> bool:
        """Whether `holder`'s have-map shows every chunk (no need to ask it again)."""
        return self.held_count.get(holder, 0) == self.n_chunks

    def want_have(self, holder: str) -> bool:
        """Whether to ask `holder` for its have-map now (not complete, none asked recently); records the ask."""
        now = time.monotonic()
        if self.complete(holder) or now - self.have_asked.get(holder, -math.inf) < self.HAVE_REFRESH_S:
            return False
        self.have_asked[holder] = now
        return True

    def set_have(self, holder: str, answer: bytes) -> None:
        """Record `holder`'s have-map answer (held bitmap, then coming bitmap; empty: nothing)."""
        nb, mask = (self.n_chunks + 7) // 8, (1 << self.n_chunks) - 1
        held_bits = int.from_bytes(answer[:nb], "little") & mask
        coming_bits = int.from_bytes(answer[nb : 2 * nb], "little") & mask & ~held_bits
        held, coming = held_bits.to_bytes(nb, "little"), coming_bits.to_bytes(nb, "little")
        old = self.have.get(holder, bytes(nb))
        gained = [i for i in changed_bits(held, old) if bit(held, i)]
        self._count(old, held)
        self._count(self.coming.get(holder, bytes(nb)), coming)
        self.have[holder], self.coming[holder] = held, coming
        self.held_count[holder] = held_bits.bit_count()
        heap = self.heaps.setdefault(holder, [])
        entries = [(self.count[i], self.pending[i], i) for i in gained if i in self.pending]
        if len(entries) > len(heap) // 8:  # many (a first map): one O(n) heapify beats n pushes
            heap.extend(entries)
            heapq.heapify(heap)
        else:
            for entry in entries:
                heapq.heappush(heap, entry)
        if gained:
            self.last_progress = time.monotonic()
            self._poke()

    def _count(self, old: bytes, new: bytes) -> None:
        """Apply a holder's bitmap change to the per-chunk holder counts; a chunk that got rarer is re-queued
        at its new rank for the holders that have it (one that got commoner is re-keyed when it surfaces)."""
        for i in changed_bits(new, old):
            if bit(new, i):
                self.count[i] += 1
            else:
                self.count[i] -= 1
                if i in self.pending:
                    self._push(i)

    def _push(self, i: int) -> None:
        """Queue pending chunk `i` at its current rarity for every holder that has it."""
        entry = (self.count[i], self.pending[i], i)
        for holder, bits in self.have.items():
            if bit(bits, i):
                heapq.heappush(self.heaps[holder], entry)

    def take(self, holder: str, n: int) -> list[int]:
        """Up to `n` pending chunks `holder` has, rarest first."""
        heap, now = self.heaps.get(holder, []), time.monotonic()
        got: list[int] = []
        later: list[tuple[int, int, int]] = []
        seed = holder in self.seeds
        if seed and self._unheard(now):
            return []  # a publisher waits (a second at most) until the other holders said what they have
        while heap and len(got) < n:
            count, rank, i = heapq.heappop(heap)
            if i not in self.pending or not bit(self.have[holder], i):
                continue  # taken from another holder or done (a chunk given back is queued again), or gone
            if count != self.count[i]:
                heapq.heappush(heap, (self.count[i], rank, i))  # commoner now: back in line at its rank
                continue
            until = self.excluded[i].get(holder, 0.0) if i in self.excluded else 0.0
            if until == math.inf:
                continue  # failed from this holder this round (new_round queues it again)
            if until > now or (seed and self._elsewhere(i, holder, now)):
                later.append((count, rank, i))  # "not yet" from this holder, or a peer has it: look again later
                continue
            got.append(i)
            del self.pending[i]
        for entry in later:
            heapq.heappush(heap, entry)
        if seed:
            self.seed_taken += len(got)
            self.seed_taken_unheard += len(got) if self._unheard_holders() else 0
        self.incoming.update(got)
        self.in_flight += len(got)
        return got

    def _unheard(self, now: float) -> bool:
        """Within the first `SEED_WAIT_S`: whether a live holder other than the publishers has not yet said what
        it has."""
        return now - self.started < self.SEED_WAIT_S and self._unheard_holders()

    def _unheard_holders(self) -> bool:
        return any(h not in self.have and h not in self.seeds and h not in self.lost for h in self.holders)

    def _elsewhere(self, i: int, holder: str, now: float) -> bool:
        """Whether a live holder other than `holder` and the publishers shows chunk `i` and may be asked now."""
        excluded = self.excluded.get(i, {})
        return any(
            h != holder and h not in self.seeds and h not in self.lost and excluded.get(h, 0.0) <= now and bit(bits, i)
            for h, bits in self.have.items()
        )

    def give_back(self, indices: Iterable[int], holder: str | None = None, *, missing: bool = False) -> None:
        """Return chunks not delivered: `holder` failed them (or, with `missing`, did not have them yet)."""
        for i in indices:
            self.in_flight -= 1
            self.incoming.discard(i)
            if holder is not None:
                counter, limit = (self.misses, self.max_misses) if missing else (self.failures, self.max_failures)
                counter[i] += 1
                if counter[i] >= limit:
                    self.failed.add(i)
                    continue
                self.excluded[i][holder] = time.monotonic() + self.MISS_RETRY_S if missing else math.inf
            self.pending[i] = self.rank[i]
            self._push(i)
        self._poke()

    def lose(self, holder: str) -> None:
        """`holder` failed as a whole (stalled, unreachable, broke the protocol): no later round asks it."""
        self.lost.add(holder)

    def done(self, i: int) -> None:
        self.in_flight -= 1
        self.incoming.discard(i)
        self.last_progress = time.monotonic()
        self._poke()

    def new_round(self) -> None:
        """Every holder may be asked for every pending chunk again."""
        self.excluded.clear()
        for holder, bits in self.have.items():
            self.heaps[holder] = [(self.count[i], r, i) for i, r in self.pending.items() if bit(bits, i)]
            heapq.heapify(self.heaps[holder])

    def _poke(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()
