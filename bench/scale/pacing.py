"""Lab mode's pacing, so that 64-128 nodes start and run on 2 cores (never what `swarmnode join` does).

- `StartGate`: at most `slots` nodes of the whole lab (every host process) start their p2pd at once. A node takes
  a slot (an exclusive `flock` on one of `slots` files in the lab's directory), starts p2pd and dials its initial
  peers (`start_p2p`, its `network.startup_timeout` counted from when it has the slot), then gives the slot back.
  Hundreds of daemons starting at once on 2 loaded cores each missed p2pd's start timeout; one or two at a time
  each start in about a second.
- `SharedPace`: a host process's samplers make at most `groups_per_s` groups a second together (16 samplers each
  capped at 4 groups/s asked for 64 groups/s of a core; the learner takes a few a second).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any


class StartGate:
    """`slots` lab-wide start slots, as lock files under `directory`; `waited_s` sums this process's waits."""

    def __init__(self, directory: Path, slots: int, poll_s: float = 0.2) -> None:
        if slots < 1:
            raise ValueError("a start gate needs at least one slot")
        self.directory, self.slots, self.poll_s = Path(directory), slots, poll_s
        self.directory.mkdir(parents=True, exist_ok=True)
        self.waited_s = 0.0
        self.starts = 0

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[int]:
        """Hold one slot (its number) while the body runs; waits, polling, while every slot is held."""
        began = time.monotonic()
        while True:
            for number in range(self.slots):
                fd = os.open(self.directory / f"slot-{number}", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self.waited_s += time.monotonic() - began
                self.starts += 1
                try:
                    yield number
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
                return
            await asyncio.sleep(self.poll_s)

    def gated(self, start: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """`start` (e.g. `start_p2p`) run while holding a slot."""

        async def gated_start(*args: Any, **kwargs: Any) -> Any:
            async with self.slot():
                return await start(*args, **kwargs)

        return gated_start


class SharedPace:
    """One process's generation budget: batches start at most `groups_per_s` groups a second in all (each batch
    books its share of the budget when it starts; batches may run side by side)."""

    def __init__(self, groups_per_s: float) -> None:
        if groups_per_s <= 0:
            raise ValueError("groups_per_s must be positive")
        self.groups_per_s = groups_per_s
        self._next = 0.0
        self.groups = 0

    async def run(self, groups: int, work: Callable[[], Awaitable[Any]]) -> Any:
        """Run `work` (a batch of `groups` groups) once the budget has room for it."""
        start = max(time.monotonic(), self._next)
        self._next = start + groups / self.groups_per_s
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        self.groups += groups
        return await work()
