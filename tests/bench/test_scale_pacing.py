"""The scale lab's pacing (bench/scale/pacing.py): lab-wide start slots held across processes' file locks, and a
process's shared generation budget."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale.pacing import SharedPace, StartGate  # noqa: E402


def test_no_more_starts_run_at_once_than_the_gate_has_slots(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, list[int]]:
        gate = StartGate(tmp_path, slots=2, poll_s=0.01)
        running, most, slots = 0, 0, []

        async def start(i: int) -> int:
            nonlocal running, most
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.02)
            running -= 1
            return i

        async def one(i: int) -> int:
            async with gate.slot() as number:
                slots.append(number)
                return await start(i)

        assert await asyncio.gather(*(one(i) for i in range(6))) == list(range(6))
        return most, slots

    most, slots = asyncio.run(scenario())
    assert most == 2 and sorted(set(slots)) == [0, 1]


def test_a_slot_held_by_another_open_file_is_not_taken(tmp_path: Path) -> None:
    import fcntl
    import os

    fd = os.open(tmp_path / "slot-0", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as another host process holding slot 0

    async def take() -> int:
        async with StartGate(tmp_path, slots=2, poll_s=0.01).slot() as number:
            return number

    try:
        assert asyncio.run(take()) == 1
    finally:
        os.close(fd)


def test_the_shared_pace_books_every_batch_and_refuses_a_zero_budget() -> None:
    async def scenario() -> int:
        pace = SharedPace(1000.0)

        async def batch() -> str:
            return "made"

        assert await asyncio.gather(*(pace.run(4, batch) for _ in range(5))) == ["made"] * 5
        return pace.groups

    assert asyncio.run(scenario()) == 20
    with pytest.raises(ValueError):
        SharedPace(0)
