"""Which peers this node has seen alive: a signed peer record in the DHT proves only that its key signed it (a
throwaway key can store thousands), so a peer is picked as a weight holder or a send target only once proven
alive within a recent window: it answered us (a chunk, a manifest, a probe), or our p2pd holds a connection to it.

`ProvenAlive` keeps those proofs and probes unproven candidates in the background, a bounded number per refresh
(`probes_per_refresh`, each within `probe_timeout`), and waits `retry_after` (doubling, capped) before probing a
peer that did not answer again: a flood of dead records costs a bounded number of dials per heartbeat, never a
pause. A peer that failed us in an exchange (`fail`: a holder that stalled or broke a fetch) is treated like one
that did not answer a probe: no proof counts for it until its wait is over, even a live connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable

from swarmnode.backoff import Backoff

logger = logging.getLogger(__name__)

Probe = Callable[[str], Awaitable[bool]]  # peer id -> whether it answered


class ProvenAlive:
    """Proofs of life per peer id (see the module docstring). `probe(peer)` answers whether `peer` answered a
    cheap request; None: no probing (only marks and connections prove a peer)."""

    def __init__(
        self,
        window: float,
        probe: Probe | None = None,
        *,
        probes_per_refresh: int = 16,
        probe_timeout: float = 2.0,
        retry_after: float = 30.0,
        max_retry_after: float = 600.0,
    ) -> None:
        self.window = window
        self.probe = probe
        self.probes_per_refresh = probes_per_refresh
        self.probe_timeout = probe_timeout
        self.retry_after, self.max_retry_after = retry_after, max_retry_after
        self._seen: dict[str, float] = {}  # peer -> monotonic time of its latest proof
        self._failed: dict[str, Backoff] = {}  # peer -> its wait before it may prove itself again
        self._probing: asyncio.Task | None = None
        self.probes = 0  # probes sent, in total
        self.probe_failures = 0

    def mark(self, peers: Iterable[str]) -> None:
        """`peers` answered us (or hold a live connection) now; ignored for a peer still waiting out a failure."""
        now = time.monotonic()
        for peer in map(str, peers):
            if self._waited_out(peer):
                self._seen[peer] = now
                self._failed.pop(peer, None)

    def fail(self, peers: Iterable[str]) -> None:
        """`peers` failed us (no answer, a stall): not alive until `retry_after` passes, twice that the next time."""
        for peer in map(str, peers):
            self._seen.pop(peer, None)
            wait = self._failed.setdefault(peer, Backoff(self.retry_after, self.max_retry_after, jitter=False))
            wait.failure()

    def _waited_out(self, peer: str) -> bool:
        wait = self._failed.get(peer)
        return wait is None or wait.ready()

    def alive(self, peer: str) -> bool:
        """Whether `peer` proved alive within the window."""
        seen = self._seen.get(str(peer))
        return seen is not None and time.monotonic() - seen <= self.window

    def refresh(self, candidates: Iterable[str]) -> None:
        """Start probing (in the background, unless a probe round still runs) up to `probes_per_refresh` of
        `candidates` whose proof is missing or expired and that did not fail a probe lately: those with an expired
        proof first, then never-tried ones, in random order."""
        if self.probe is None or (self._probing is not None and not self._probing.done()):
            return
        due = [p for p in dict.fromkeys(map(str, candidates)) if not self.alive(p) and self._waited_out(p)]
        random.shuffle(due)
        due.sort(key=lambda p: p not in self._seen)  # stable: once-proven peers first, each group shuffled
        if due:
            self._probing = asyncio.ensure_future(self._probe_all(due[: self.probes_per_refresh]))

    async def settle(self) -> None:
        """Wait for the running probe round (if any) to end."""
        if self._probing is not None:
            await asyncio.gather(self._probing, return_exceptions=True)

    async def close(self) -> None:
        """Cancel a running probe round."""
        if self._probing is not None and not self._probing.done():
            self._probing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probing

    async def _probe_all(self, peers: list[str]) -> None:
        answered = await asyncio.gather(*(self._probe_one(p) for p in peers))
        self.probes += len(peers)
        self.probe_failures += answered.count(False)
        self.mark(p for p, ok in zip(peers, answered) if ok)
        self.fail(p for p, ok in zip(peers, answered) if not ok)
        if len(self._failed) > 16 * 1024:  # forget the oldest failures of a long flood (bounded memory)
            for peer in sorted(self._failed, key=lambda p: self._failed[p].not_before)[: len(self._failed) // 2]:
                del self._failed[peer]

    async def _probe_one(self, peer: str) -> bool:
        assert self.probe is not None  # refresh probes only with a probe
        try:
            return bool(await asyncio.wait_for(self.probe(peer), self.probe_timeout))
        except asyncio.CancelledError:
            raise
        except Exception:  # unreachable, no such handler, timeout: not proven
            return False
