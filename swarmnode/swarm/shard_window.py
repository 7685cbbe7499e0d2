"""A sampler's bounded look at the run's peer records: a few shards a refresh, rotating over all of them.

`LivePeers` needs candidates for weight holders beyond the learners: about `network.peer_sample` records of the
run. Reading shards until that many records are found reads every shard of a small run (fewer records than the
sample) on every look, and each shard read is a DHT lookup that asks every node of a small run: the cost per node
then grows with the run. `ShardWindow` bounds it: a look reads at most `window` shards (one batched DHT read),
the next ones of a random rotation, and keeps what it read by shard. The sample is the newest shards kept, up to
`sample` records (shards whose records are older than a pass are replaced as the rotation comes back to them):

- the first look reads whole shards until `sample` records or every shard (a node that just joined a small run
  sees every holder at once);
- while the kept sample is short of `sample` records (a small run), each look reads the next `window` shards: a
  peer that joins later is seen within `passes_in()` looks;
- once it holds `sample` records (a large run), a look reads only every `every` looks.

So a look reads at most max(`window`, the first look's) shards, and a minute of looks at most `window` x looks a
minute, whatever the run's size.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable

Records = list  # PeerRecord-like objects with `state` ("up" or leaving)
ReadShards = Callable[[list[int]], Awaitable[dict[int, Records]]]
SampleShards = Callable[[int], Awaitable[dict[int, Records]]]

DEFAULT_WINDOW = 8  # shards one look reads: a pass over 64 shards in 8 looks (40 s at a 5 s heartbeat)


class ShardWindow:
    """Which shards to read next and the sample they make (see the module docstring). `read(shards)` is one
    batched read of those shards (`SwarmDHT.read_shards`); `first(sample)` the first look's read until `sample`
    records (`SwarmDHT.sample_shards`)."""

    def __init__(
        self,
        shards: int,
        sample: int,
        *,
        window: int = DEFAULT_WINDOW,
        every: int = 5,
        rng: random.Random | None = None,
    ) -> None:
        if shards < 1 or sample < 1 or window < 1 or every < 1:
            raise ValueError("shards, sample, window and every must be at least 1")
        self.shards, self.sample, self.window, self.every = shards, sample, min(window, shards), every
        self._rng = rng or random.Random()
        self._order: list[int] = []
        self._kept: dict[int, tuple[int, Records]] = {}  # shard -> (look it was read at, its live records)
        self._looks = 0
        self._since_read = 0
        self.last_read: list[int] = []  # the shards the last look read (empty: it read none)
        self.shards_read = 0  # shards read by every look so far

    def passes_in(self) -> int:
        """Looks in which the rotation reads every shard once (a newcomer's record is seen within this many)."""
        return math.ceil(self.shards / self.window)

    @property
    def full(self) -> bool:
        """The kept sample holds at least `sample` records (a large run)."""
        return sum(len(records) for _, records in self._kept.values()) >= self.sample

    def records(self) -> Records:
        """The sample: the kept shards' records, newest-read shards first."""
        return [r for _, (_, records) in sorted(self._kept.items(), key=lambda kv: -kv[1][0]) for r in records]

    def _due(self) -> int:
        """Shards the next read needs: a window, or fewer where the shards seen hold many records each (a
        large run: about `sample` records' worth)."""
        seen = [len(records) for _, records in self._kept.values()]
        per_shard = sum(seen) / len(seen) if seen else 0.0
        return self.window if per_shard <= 0 else max(1, min(self.window, math.ceil(self.sample / per_shard)))

    def _next(self) -> list[int]:
        out: list[int] = []
        due = self._due()
        while len(out) < due:
            if not self._order:
                self._order = list(range(self.shards))
                self._rng.shuffle(self._order)
            shard = self._order.pop()
            if shard not in out:
                out.append(shard)
        return out

    def _keep(self, found: dict[int, Records]) -> None:
        for shard, records in found.items():
            self._kept[shard] = (self._looks, [r for r in records if r.state == "up"])
        total = 0
        for shard, (_, records) in sorted(self._kept.items(), key=lambda kv: -kv[1][0]):
            if total >= self.sample:  # enough newer records: an older shard leaves the sample
                del self._kept[shard]
            else:
                total += len(records)

    async def look(self, read: ReadShards, first: SampleShards) -> Records:
        """One look: read what is due (nothing, the next window, or on the first look a whole sample) and return
        the sample."""
        if self._looks == 0:
            found = await first(self.sample)
            self.last_read = list(found)
        elif not self.full or self._since_read + 1 >= self.every:
            self.last_read = self._next()
            found = await read(self.last_read)
        else:
            self.last_read, found = [], {}
        self.shards_read += len(self.last_read)
        self._since_read = 0 if self.last_read else self._since_read + 1
        self._keep(found)
        self._looks += 1
        return self.records()
