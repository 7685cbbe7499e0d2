"""`ComputeThread`: the one thread a role runs its model work on (loading, steps, generation, saving).

`asyncio.to_thread` hands each call to whichever thread of the default executor is free, so a role's steps and
batches hopped between several threads. glibc gives each thread its own malloc arena, and a thread's arena has to
grow (faulting its pages in) before the model work on that thread runs at full speed: a learner joining a running
swarm on `tiny-digitmap` took 0.36-0.59 s for each of its first two steps, against 0.15 s for the same step in
`train-local` (one thread), and its first step came 0.6-1.0 s after train-local's; on one thread its first steps
take 0.15-0.2 s (`bench/compute_thread.py` measures it). One thread also makes it plain that two pieces of a role's
model work never overlap.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

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
