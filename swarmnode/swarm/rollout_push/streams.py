"""Stream names and ack statuses shared by both ends of a rollout push, and the polite close."""

from __future__ import annotations

import asyncio
import contextlib
import time

RETRY_STATUSES = frozenset({"rate_limited", "busy"})  # resent after an exponential backoff
FULL = "full"  # the learner holds enough groups for now: resent after a short flat wait, no backoff
CLOSING_STATUSES = frozenset({"oversized", "truncated", "banned"})


def push_protocol(run_id: str, stream: str = "rollouts") -> str:
    return f"swarmnode/{run_id}/{stream}/1"


def pull_protocol(run_id: str, stream: str = "rollouts") -> str:
    return f"swarmnode/{run_id}/{stream}-pull/1"


async def linger(reader: asyncio.StreamReader, seconds: float = 2.0) -> None:
    """Before closing after a final ack, let the peer hang up first (an immediate close can drop the ack)."""
    deadline = time.monotonic() + seconds
    with contextlib.suppress(asyncio.TimeoutError, ConnectionError, OSError):
        while time.monotonic() < deadline:
            if not await asyncio.wait_for(reader.read(1 << 16), deadline - time.monotonic()):
                break
