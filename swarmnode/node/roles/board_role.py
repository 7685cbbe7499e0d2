"""The contributors board in the working roles: the learner keeps and publishes it, a sampler reads its own line.

`BoardKeeper` (learner): loads the board an earlier process of this learner saved (`swarmnode.board.durable`),
counts each step as the steps file records it and the groups refused at the door (`counting`), and on every
heartbeat saves it and stores its signed board and curves in the DHT (`swarm.board_keys`). `OwnLine`
(sampler): every `READ_EVERY_BEATS` heartbeats reads the boards of the learners it sends to and keeps its own
line in `health.json` (`board`), which `status --self` prints.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmnode.board.durable import LearnerBoard
from swarmnode.identity import Identity
from swarmnode.swarm.board_keys import read_boards, store_board
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.rollout_push.streams import FULL

logger = logging.getLogger(__name__)
NOT_REFUSALS = ("ok", FULL, "busy", "duplicate")  # flow control and repeats, not a verdict on the group
READ_EVERY_BEATS = 12  # a minute at the default 5 s heartbeat: a sampler reads ~12 KB per learner a minute


class BoardKeeper:
    """A learner's board (see the module docstring)."""

    def __init__(self, data_dir: Path, dht: SwarmDHT, identity: Identity, run_id: str, interval: float) -> None:
        self.board = LearnerBoard.load(data_dir)
        self.dht, self.identity, self.run_id, self.interval = dht, identity, run_id, interval
        self.published = 0  # boards stored

    def step(self, record: dict[str, Any]) -> None:
        """A step as the steps file holds it (an untrained step: its refusals only)."""
        self.board.add_step({"time": time.time(), **record})

    def refuse(self, peer_id: str, reason: str) -> None:
        self.board.tally.refuse(peer_id, reason, at=time.time())

    def counting(self, admit: Callable[[Any], str]) -> Callable[[Any], str]:
        """`admit` that also counts the groups it refuses against their senders."""

        def admit_counted(group: Any) -> str:
            status = admit(group)
            if status not in NOT_REFUSALS:
                self.refuse(group.sampler_id, status)
            return status

        return admit_counted

    async def publish(self) -> None:
        """Save the board to disk, then store its records in the DHT."""
        await asyncio.to_thread(self.board.save)
        board, curves = self.board.records(self.identity, self.run_id)
        if await store_board(self.dht, board, curves):
            self.published += 1

    async def run(self, stop: asyncio.Event) -> None:
        """Publish on every heartbeat until `stop`; a DHT hiccup is logged, never fatal."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.interval)
                return
            except TimeoutError:
                pass
            try:
                await self.publish()
            except Exception as exc:
                logger.info("publishing the contributors board failed: %s", exc)


class OwnLine:
    """A sampler's own line of its learners' boards, for `health.json` (see the module docstring)."""

    def __init__(self, dht: SwarmDHT, peer_id: str) -> None:
        self.dht, self.peer_id = dht, peer_id
        self.beats = 0

    async def maybe_read(self, learners: list[str]) -> dict[str, Any] | None:
        """Every `READ_EVERY_BEATS`th call: this sampler's line summed over `learners`' boards (None otherwise)."""
        self.beats += 1
        if (self.beats - 1) % READ_EVERY_BEATS or not learners:
            return None
        boards = await read_boards(self.dht, learners)
        line: dict[str, Any] = {"groups": 0, "tokens": 0, "refused": 0, "learners": 0, "ranks": [], "at": 0.0}
        for board, _ in boards.values():
            if board is None:
                continue
            line["learners"] += 1
            line["at"] = max(line["at"], board.at)
            for rank, entry in enumerate(board.entries, 1):
                if entry.peer_id == self.peer_id:
                    line["groups"] += entry.groups
                    line["tokens"] += entry.tokens
                    line["refused"] += sum(entry.refused.values())
                    line["ranks"].append([rank, board.samplers])
        return line
