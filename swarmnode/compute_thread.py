"""`ComputeThread`: the one thread a role runs its model work on (loading, steps, generation, saving).

`asyncio.to_thread` hands each call to whichever thread of the default executor is free (the node's other blocking
calls share it), so a role's steps and batches would hop between threads. glibc gives each thread its own malloc
arena, which has to grow (faulting its pages in) before model work on that thread runs at full speed, and the
memory one thread's arena holds is not reused by another's: a learner joining a warm swarm takes its first steps
2-4x slower on the executor than on one thread. On one compute thread a learner makes 1.02x the steps/s
(bench/compute-thread). One thread also makes it plain that two pieces of a role's model work never overlap: a
checkpoint written at shutdown waits for a step still running.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class ComputeThread:
    """A single worker thread; `await compute.run(fn, *args)` runs `fn(*args)` on it (calls queue in order)."""

    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the thread, with the caller's context variables (as `asyncio.to_thread` passes them)."""
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        """Let the thread end once the call it is running (if any) returns; calls still queued are dropped."""
        self._pool.shutdown(wait=False, cancel_futures=True)
