"""First serves: a weight server sends a chunk to one fetcher, then lets that fetcher spread it for a moment.

When a version appears, its publisher is every chunk's only holder, and every fetcher that arrives within the same
second asks it first: rarest-first cannot help while no peer holds anything. As BitTorrent's super-seeding does, a
server that has just sent chunk c to one peer answers another peer's request for c "not yet" (an empty answer)
while that peer is still fetching from it (its stream open), for at least `hold_s` and at most `max_hold_s`: the
asker tries again later and meanwhile finds c in the first receiver's have-map, so the publisher's upload goes to
chunks nobody has yet. A lone fetcher is never held (each chunk's first serve is its own), and a receiver that does
not pass the chunk on delays the others by `max_hold_s` at most. A stranger's first serve holds strangers only: a
flood of strangers racing for every chunk's first serve cannot keep the publisher's chunks from its trusted peers
(see `slots` for who is trusted). Fetches that do not overlap are the fetcher's side (`schedule`: a publisher is
asked only for chunks no other live holder shows).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

HOLD_S = 1.0  # a hold lasts this long at least (a 256 KiB chunk crosses a 20 Mbit/s uplink in ~0.1 s) ...
MAX_HOLD_S = 10.0  # ... and while its first receiver fetches, this long at most
MEMORY = 65_536  # chunks remembered at most (older first serves are forgotten first)


class FirstServes:
    """Which peer a chunk went to first, and when; `defer(chunk, peer)` is the server's question."""

    def __init__(
        self,
        hold_s: float = HOLD_S,
        max_hold_s: float = MAX_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
        memory: int = MEMORY,
    ) -> None:
        self.hold_s, self.max_hold_s, self.clock, self.memory = hold_s, max(hold_s, max_hold_s), clock, memory
        self.streams: collections.Counter[str] = collections.Counter()  # open streams by peer
        self._first: collections.OrderedDict[str, tuple[float, str, bool]] = collections.OrderedDict()
        self.deferred = 0

    def defer(self, chunk: str, peer: str, trusted: bool = True) -> bool:
        """True: answer `peer` "not yet" for `chunk` (another peer got it first and its hold lasts: `hold_s`, or
        while that peer still fetches, `max_hold_s` at most; for a `trusted` peer, another trusted one)."""
        entry = self._first.get(chunk)
        if entry is None or entry[1] == peer or not self._holding(entry) or (trusted and not entry[2]):
            return False
        self.deferred += 1
        return True

    def served(self, chunk: str, peer: str, trusted: bool = True) -> None:
        """`chunk` was sent to `peer`: its first serve, unless a first serve is still holding (a trusted peer's
        serve replaces a stranger's)."""
        now = self.clock()
        entry = self._first.get(chunk)
        if entry is not None and self._holding(entry) and (entry[2] or not trusted):
            return
        self._first[chunk] = (now, peer, trusted)
        self._first.move_to_end(chunk)
        while len(self._first) > self.memory:
            self._first.popitem(last=False)

    def opened(self, peer: str) -> None:
        """A stream from `peer` opened (its first serves hold while it fetches)."""
        self.streams[peer] += 1

    def closed(self, peer: str) -> None:
        """A stream from `peer` closed."""
        self.streams[peer] -= 1
        if self.streams[peer] <= 0:
            del self.streams[peer]

    def _holding(self, entry: tuple[float, str, bool]) -> bool:
        age = self.clock() - entry[0]
        return age < self.hold_s or (age < self.max_hold_s and self.streams[entry[1]] > 0)
