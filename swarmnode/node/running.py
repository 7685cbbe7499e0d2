"""What `join` runs: the interface every role offers, the sampler's and learner's `NodeRole` (`node.roles`) and
the SAPO node (`node.sapo`), which share no code otherwise."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol


class RunningRole(Protocol):
    """A constructed role: its health record (what /metrics and the peer record show) and its work loop."""

    health: Any

    async def run(self, stop: asyncio.Event) -> None:
        """Work until `stop` is set, then wind down."""
        ...
