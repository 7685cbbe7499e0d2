"""ExternalPool: text rollout groups received from peers, waiting to be trained on.

Bounded per peer (the newest `per_peer` of each peer are kept; older ones are dropped and counted as
`overflow`), deduplicated by group id, and aged out after `max_age` seconds. `take(n, max_per_peer)` hands out
at most `max_per_peer` groups of any one peer, newest first, going round the peers in a random order, so a
peer that floods can never hold more than its bound of any batch. Every outcome is counted per peer. The
network thread adds while the training thread takes: every method holds one lock.
"""

from __future__ import annotations

import collections
import random
import threading
import time
from collections.abc import Callable

from swarmnode.protocol.text_rollout import TextRolloutGroup


class ExternalPool:
    """Peers' groups until used; see the module docstring."""

    def __init__(
        self,
        own_id: str,
        per_peer: int,
        max_age: float,
        seen_capacity: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ):
        if per_peer < 1 or max_age <= 0:
            raise ValueError("per_peer >= 1 and max_age > 0 are required")
        self.own_id, self.per_peer, self.max_age = own_id, per_peer, max_age
        self.clock = clock
        self.rng = rng or random.Random(0)
        self._queues: dict[str, collections.deque[tuple[float, TextRolloutGroup]]] = {}
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._seen_capacity = seen_capacity
        self.counters: collections.Counter[str] = collections.Counter()
        self.by_peer: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def add(self, group: TextRolloutGroup) -> str:
        """Offer one (already validated) group: "ok", "own" or "duplicate"; a full peer queue drops its oldest."""
        peer = group.sampler_id
        with self._lock:
            if peer == self.own_id:
                status = "own"
            elif group.group_id in self._seen:
                status = "duplicate"
            else:
                status = "ok"
                self._seen[group.group_id] = None
                while len(self._seen) > self._seen_capacity:
                    self._seen.popitem(last=False)
                queue = self._queues.setdefault(peer, collections.deque())
                if len(queue) >= self.per_peer:
                    queue.popleft()
                    self._count(peer, "overflow")
                queue.append((self.clock(), group))
            self._count(peer, status)
            return status

    def take(
        self, n: int, max_per_peer: int, exclude: frozenset[str] | set[str] = frozenset()
    ) -> list[TextRolloutGroup]:
        """Remove and return up to `n` groups, at most `max_per_peer` from any peer, newest first per peer; the
        groups of peers in `exclude` stay (and age out)."""
        with self._lock:
            self._expire()
            peers = [p for p, q in self._queues.items() if q and p not in exclude]
            self.rng.shuffle(peers)
            taken: collections.Counter[str] = collections.Counter()
            out: list[TextRolloutGroup] = []
            while len(out) < n:
                progressed = False
                for peer in peers:
                    queue = self._queues[peer]
                    if len(out) >= n or not queue or taken[peer] >= max_per_peer:
                        continue
                    out.append(queue.pop()[1])
                    taken[peer] += 1
                    progressed = True
                if not progressed:
                    break
            for peer, count in taken.items():
                self.by_peer[peer]["taken"] += count
            self.counters["taken"] += len(out)
            return out

    def peers(self) -> list[str]:
        """Peers with groups waiting."""
        with self._lock:
            return [p for p, q in self._queues.items() if q]

    def _expire(self) -> None:
        cutoff = self.clock() - self.max_age
        for peer, queue in self._queues.items():
            while queue and queue[0][0] < cutoff:
                queue.popleft()
                self._count(peer, "expired")

    def _count(self, peer: str, status: str) -> None:
        self.counters[status] += 1
        self.by_peer[peer][status] += 1
