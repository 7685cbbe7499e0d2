"""ComputeThread: every call of a role's model work on one thread, in order, with the caller's context."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from swarmnode.compute_thread import ComputeThread


def test_every_call_runs_on_one_thread_other_than_the_loop():
    compute = ComputeThread("test-compute")

    async def main() -> set[int]:
        loop_thread = threading.get_ident()
        seen = set()
        for _ in range(20):
            seen.add(await compute.run(threading.get_ident))
            await asyncio.to_thread(time.sleep, 0)  # other work on the default executor meanwhile
        assert loop_thread not in seen
        return seen

    try:
        assert len(asyncio.run(main())) == 1
    finally:
        compute.close()


def test_calls_run_one_at_a_time_in_the_order_given():
    compute = ComputeThread("test-compute")
    running, order, overlaps = [0], [], []

    def work(i: int) -> int:
        running[0] += 1
        overlaps.append(running[0])
        time.sleep(0.01)
        order.append(i)
        running[0] -= 1
        return i

    async def main() -> list[int]:
        return await asyncio.gather(*(compute.run(work, i) for i in range(8)))

    try:
        assert asyncio.run(main()) == list(range(8))
    finally:
        compute.close()
    assert order == list(range(8)) and max(overlaps) == 1


def test_an_exception_reaches_the_caller_and_the_thread_goes_on():
    compute = ComputeThread("test-compute")

    def fail() -> None:
        raise ValueError("bad batch")

    async def main() -> int:
        with pytest.raises(ValueError, match="bad batch"):
            await compute.run(fail)
        return await compute.run(lambda: 7)

    try:
        assert asyncio.run(main()) == 7
    finally:
        compute.close()


def test_the_callers_context_variables_are_seen():
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    compute = ComputeThread("test-compute")

    async def main() -> str:
        var.set("caller's")
        return await compute.run(var.get)

    try:
        assert asyncio.run(main()) == "caller's"
    finally:
        compute.close()


def test_close_lets_the_thread_end():
    compute = ComputeThread("ended-compute")

    async def main() -> None:
        await compute.run(lambda: None)

    asyncio.run(main())
    compute.close()
    deadline = time.monotonic() + 5
    while any(t.name.startswith("ended-compute") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name.startswith("ended-compute") for t in threading.enumerate())
