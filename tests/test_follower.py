"""Version following (`swarm.follower.WeightFollower`) on its own: new versions seen via the DHT and via acks,
older ones ignored, one fetch at a time, a failing fetch retried only after an exponential, capped, jittered
backoff (the too-stale branch once retried in a hot loop: 5,628 warnings in 49 s), the sampler catching up
when paused. The version source and the fetch are plain in-process functions; the swarm tests drive the real
ones (test_demo, test_learner_restart)."""

from __future__ import annotations

import asyncio
import random

import pytest

from swarmnode.backoff import Backoff
from swarmnode.swarm.follower import WeightFollower
from swarmnode.swarm.weights import FetchError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Swarm:
    """What the follower sees: the newest announcement, and a fetch that fails while `failing` is set."""

    def __init__(self) -> None:
        self.announced: tuple[int, dict] | None = None
        self.fetched: list[tuple[int, str | None]] = []
        self.attempts = 0
        self.failing = False
        self.gate: asyncio.Event | None = None

    async def newest(self):
        return self.announced

    async def fetch(self, version: int, pointer: dict) -> None:
        self.attempts += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise FetchError(f"no holder served version {version}")
        self.fetched.append((version, pointer.get("publisher")))


def follower(swarm: Swarm, clock: Clock | None = None, **kwargs) -> WeightFollower:
    backoff = Backoff(base=1.0, cap=8.0, rng=random.Random(0), clock=clock or Clock())
    return WeightFollower(swarm.newest, swarm.fetch, backoff=backoff, **kwargs)


async def settle(f: WeightFollower) -> None:
    while not f.idle:
        await asyncio.sleep(0)


def test_new_versions_from_the_dht_are_fetched_and_older_ones_ignored():
    async def main():
        swarm = Swarm()
        f = follower(swarm)
        await f.poll()  # nothing announced yet
        assert f.newest == -1 and swarm.attempts == 0
        swarm.announced = (3, {"publisher": "L"})
        await f.poll(wait=True)
        assert swarm.fetched == [(3, "L")] and f.offered == 3 and f.newest == 3
        swarm.announced = (2, {"publisher": "L"})  # an older announcement (a slow DHT replica)
        await f.poll(wait=True)
        await f.poll(wait=True)
        assert swarm.fetched == [(3, "L")] and f.newest == 3
        f.hint(3, "L")  # an ack telling what we hold already
        f.hint(1, "L")
        await settle(f)
        assert swarm.attempts == 1

    asyncio.run(main())


def test_an_ack_hint_is_fetched_at_once_from_that_learner_if_trusted():
    async def main():
        swarm = Swarm()
        f = follower(swarm, trusted=["L1"])
        f.hint(5, "L2")  # not one of the run's learners: neither fetched nor believed
        await settle(f)
        assert f.newest == -1 and swarm.attempts == 0
        f.hint(6, "L1")
        await settle(f)
        assert swarm.fetched == [(6, "L1")] and f.offered == 6 and f.lag(6) == 0

    asyncio.run(main())


def test_one_fetch_at_a_time():
    async def main():
        swarm = Swarm()
        swarm.gate = asyncio.Event()
        f = follower(swarm)
        f.hint(1, "L")
        await asyncio.sleep(0)
        f.hint(2, "L")  # the first fetch is still running: this one waits for a later look
        swarm.announced = (2, {"publisher": "L"})
        await f.poll()
        assert swarm.attempts == 1 and not f.idle
        swarm.gate.set()
        await settle(f)
        await f.poll(wait=True)
        assert swarm.fetched == [(1, "L"), (2, "L")]

    asyncio.run(main())


def test_a_failing_fetch_backs_off_exponentially_with_jitter_up_to_the_cap():
    async def main():
        clock, swarm = Clock(), Swarm()
        swarm.failing = True
        swarm.announced = (4, {"publisher": "L"})
        f = follower(swarm, clock)
        delays = []
        for _ in range(7):
            await f.poll()
            await settle(f)
            await f.poll()  # again at once: refused while backing off
            await settle(f)
            f.hint(4, "L")  # an ack too
            await settle(f)
            delays.append(f.backoff.remaining())
            clock.now += delays[-1]
        assert swarm.attempts == 7 and f.failures == 7 and f.offered == -1
        ceilings = [1, 2, 4, 8, 8, 8, 8]
        assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings)), delays
        assert len(set(delays)) == len(delays)  # jittered
        swarm.failing = False
        await f.poll(wait=True)
        assert f.offered == 4 and f.backoff.failures == 0  # success starts over

    asyncio.run(main())


def test_a_paused_sampler_waits_out_the_backoff_instead_of_retrying_hot():
    """The too-stale branch calls poll(wait=True) in a loop: with the fetch failing, attempts stay bounded by
    the backoff (each wait sleeps until the next try), not by how fast the loop spins."""

    async def main():
        swarm = Swarm()
        swarm.failing = True
        swarm.announced = (9, {"publisher": "L"})
        f = WeightFollower(swarm.newest, swarm.fetch, backoff=Backoff(base=0.05, cap=0.2, rng=random.Random(1)))
        loop = asyncio.get_running_loop()
        end = loop.time() + 0.5
        rounds = 0
        while loop.time() < end:
            await f.poll(wait=True, timeout=1.0)
            rounds += 1
        assert swarm.attempts == rounds  # each round waited for its own try...
        assert swarm.attempts <= 12  # ...spaced by the backoff: ~0.03+0.05+0.1+0.1+... s, not thousands

    asyncio.run(main())


def test_backoff_rejects_a_nonsense_range():
    with pytest.raises(ValueError):
        Backoff(base=0, cap=1)
    with pytest.raises(ValueError):
        Backoff(base=2, cap=1)


def test_pull_mode_asks_the_learners_and_looks_in_the_dht_only_when_none_answers():
    async def main():
        swarm = Swarm()
        swarm.announced = (3, {"publisher": "L"})
        told: list[tuple[int, dict] | None] = [(5, {"publisher": "L"})]
        asked, looked = [], []

        async def ask_learners():
            asked.append(1)
            return told[0]

        async def newest():
            looked.append(1)
            return swarm.announced

        f = WeightFollower(
            newest,
            swarm.fetch,
            ask_learners=ask_learners,
            backoff=Backoff(base=1.0, cap=8.0, rng=random.Random(0), clock=Clock()),
        )
        await f.poll(wait=True, direct=True)
        assert swarm.fetched == [(5, "L")] and not looked  # the learner's answer alone: no DHT look
        told[0] = None  # no learner answered: the DHT's announcement is the fallback
        swarm.announced = (7, {"publisher": "L"})
        await f.poll(wait=True, direct=True)
        assert swarm.fetched == [(5, "L"), (7, "L")] and len(looked) == 1
        await f.poll(wait=True)  # the heartbeat's look: the DHT, never the learners
        assert len(asked) == 2 and len(looked) == 2

    asyncio.run(main())
