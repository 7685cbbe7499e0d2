"""PeerDistrust: a peer whose groups keep failing this node's checks loses its place in the node's batches.

The plausibility check judges one group at a time; a peer that sends implausible text again and again is probing
for the rare group that passes. This keeps each peer's last `RECORD` check outcomes; once at least
`MIN_OUTCOMES` are known and more than `max_refused_share` of them were refusals, the peer is distrusted for
`seconds`: the pool hands out none of its groups (they age out unused, costing the node no forward pass); then
its record starts afresh. An honest peer of the same model has about 1 % of its groups refused
(bench/sapo-marker-attack), far from the default 25 %.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

RECORD = 32  # check outcomes kept per peer
MIN_OUTCOMES = 8  # outcomes needed before a peer can be distrusted


class PeerDistrust:
    """Per-peer records of check outcomes and the set of distrusted peers; see the module docstring."""

    def __init__(
        self, max_refused_share: float = 0.25, seconds: float = 300.0, clock: Callable[[], float] = time.monotonic
    ):
        if not 0.0 <= max_refused_share <= 1.0 or seconds <= 0:
            raise ValueError("0 <= max_refused_share <= 1 and seconds > 0 are required")
        self.max_refused_share, self.seconds, self.clock = max_refused_share, seconds, clock
        self._outcomes: dict[str, collections.deque[bool]] = {}
        self._until: dict[str, float] = {}  # distrusted peer -> when its distrust ends
        self.episodes: collections.Counter[str] = collections.Counter()  # peer -> times it was distrusted
        self._lock = threading.Lock()

    def record(self, peer: str, passed: bool) -> None:
        """One check outcome of one of `peer`'s groups."""
        with self._lock:
            outcomes = self._outcomes.setdefault(peer, collections.deque(maxlen=RECORD))
            outcomes.append(passed)
            if (
                peer not in self._until
                and len(outcomes) >= MIN_OUTCOMES
                and outcomes.count(False) > self.max_refused_share * len(outcomes)
            ):
                self._until[peer] = self.clock() + self.seconds
                self.episodes[peer] += 1

    def distrusted(self) -> set[str]:
        """The peers whose groups are not to be taken now (an ended distrust clears the peer's record)."""
        with self._lock:
            now = self.clock()
            for peer in [p for p, until in self._until.items() if until <= now]:
                del self._until[peer]
                self._outcomes.pop(peer, None)
            return set(self._until)
