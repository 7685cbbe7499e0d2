"""When a learner of a run with several learners (`learner.max_learners` > 1) averages, and what it publishes.

- Alone (no other live learner of the run in the DHT, or none of `trust.learner_keys`) for two peer-record
  lifetimes in a row, counted from its start (two learners started together see each other by then, instead of
  both publishing their own, different, version 1; and a heartbeat that came late on a busy machine does not
  make a learner alone): it trains and publishes a version every `publish_every` steps, as a single learner
  does. Two learners that cannot see each other (a partition) both do so, under the same
  numbers; their next common round reunites the numbering (max + 1).
- With others: it publishes no version of its own between rounds. Every `average_every` trained steps it runs a
  round (`swarmnode.swarm.averaging`); after a successful one it publishes the averaged weights under the version
  the group agreed on (the same number, with the same chunks, at every member). A failed round (nobody came in
  `averaging_timeout`, a peer died mid-round) changes nothing: it trains on and counts the failure; once a dead
  peer's record expires it is alone again and publishes on its own.
- On start it downloads the last published state of another learner when that one holds a newer version.

Spot checks judge a group by the weights of the version it claims only where this learner's weights of that
version are certainly the ones the sampler had: versions it reached in a round or loaded from a peer, and any
version of a group made from this learner's own manifests (its lineage).
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import torch

from swarmnode.config import NodeConfig
from swarmnode.learner.loop import LearnerLoop
from swarmnode.swarm.averaging import LearnerAveraging
from swarmnode.swarm.dht import SwarmDHT

SHARED_VERSIONS_KEPT = 256


def averaging_enabled(cfg: NodeConfig) -> bool:
    """Whether a learner of this config averages with the run's other learners."""
    return cfg.learner.max_learners > 1 and cfg.mode != "sapo"


class AveragingRounds:
    """Drives `averaging` for `learner`: `await join()` once, `await after_step()` after every trained step."""

    def __init__(
        self, learner: LearnerLoop, averaging: LearnerAveraging, dht: SwarmDHT, cfg: NodeConfig, me: str, emit: Any
    ) -> None:
        self.learner, self.averaging, self.dht, self.cfg, self.me, self.emit = learner, averaging, dht, cfg, me, emit
        self.trusted = frozenset(cfg.trust.learner_keys)
        self.others: list[str] = []
        self.since_round = 0
        self.shared_versions: collections.deque[int] = collections.deque(maxlen=SHARED_VERSIONS_KEPT)
        self._read_at = -float("inf")
        self.last_seen = time.monotonic()  # when another learner was last seen (or we started)
        self.grace = 2 * dht.record_ttl  # seeing none for this long makes a learner alone

    def checkable(self, group: Any) -> bool:
        return group.lineage == self.me or int(group.policy_version) in self.shared_versions

    async def refresh(self, force: bool = False) -> None:
        """Re-read the run's other live learners (at most once per heartbeat unless `force`)."""
        if not force and time.monotonic() - self._read_at < self.cfg.network.heartbeat_interval:
            return
        self._read_at = time.monotonic()
        learners = await self.dht.live_peers("learner")
        self.others = [
            r.peer_id for r in learners if r.peer_id != self.me and (not self.trusted or r.peer_id in self.trusted)
        ]
        if self.others:
            self.last_seen = time.monotonic()
        self.learner.local_versions = not self.others and time.monotonic() - self.last_seen >= self.grace

    async def join(self) -> None:
        """Take another learner's last published state if it is newer than ours."""
        await self.refresh(force=True)
        if not self.others:
            self.emit("averaging: no other learner is live yet")
            return
        loaded = await asyncio.to_thread(self.averaging.load_from_peers)
        if loaded is None or loaded[0] <= self.learner.version:
            self.emit(
                f"averaging: {len(self.others)} other learner(s); "
                + (
                    "none shared its state"
                    if loaded is None
                    else f"their version {loaded[0]} is not newer than ours ({self.learner.version})"
                )
            )
            return
        version = await asyncio.to_thread(self._adopt, *loaded)
        self.emit(f"averaging: loaded version {version} from another learner")

    def _adopt(self, version: int, tensors: list[torch.Tensor]) -> int:
        with torch.no_grad():
            for param, tensor in zip(self.averaging.params, tensors):
                param.copy_(tensor)
        published = self.learner.adopt_version(version)
        self.averaging.set_anchor(published)  # the others' interval started from these weights too
        self.shared_versions.append(published)
        return published

    async def after_step(self) -> None:
        """Count the step; run a round when one is due and other learners are live."""
        try:
            await self.refresh()
        except Exception:  # a DHT hiccup: keep the last view
            pass
        if not self.others:
            self.since_round = 0
            return
        self.since_round += 1
        if self.since_round < self.cfg.learner.average_every:
            return
        self.since_round = 0
        result = await asyncio.to_thread(self.averaging.round, self.learner.version)
        if result.version is not None:
            self.shared_versions.append(await asyncio.to_thread(self.learner.adopt_version, result.version))

    def health(self) -> dict[str, Any]:
        """The averaging fields of the learner's health record."""
        last = self.averaging.last
        out: dict[str, Any] = {
            "averaging_rounds": self.averaging.rounds,
            "averaging_failures": self.averaging.failures,
            "averaging_learners": len(self.others) + 1,
        }
        if last is not None and last.version is not None:
            out.update(
                averaging_group=last.group_size,
                averaging_seconds=round(last.seconds, 3),
                averaging_mb=round(self.averaging.bytes_per_round(last.group_size) / 1e6, 3),
                averaging_outer_lr=last.outer_lr,
            )
        return out
