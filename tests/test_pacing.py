"""Credit pacing's parts: the learner's credit policy, the ack's credit field, the sampler's pacer, the buffer
that records what it throws away, and the one staleness rule every place checks `sync.max_staleness` by."""

from __future__ import annotations

import asyncio
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.waste import MeteredBuffer, waste_between
from swarmnode.observe.health import find_alerts
from swarmnode.sampler.pacing import OUTBOX_LIMIT, Pacer
from swarmnode.staleness import too_stale
from swarmnode.swarm.rollout_push import RolloutReceiver
from swarmnode.swarm.rollout_push.credit import CreditPolicy, credit_target, told_credit

sys.path.insert(0, str(Path(__file__).parent))
from gossip_peer import LIMITS, RUN, make_group  # noqa: E402
from push_helpers import daemons, pushing, wait_for  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------------------------ the learner's credits
def test_the_credit_cap_is_half_what_the_bound_lets_the_learner_train_in_time_unless_set():
    assert credit_target(8, 1, 16) == 64  # 8 groups x 16 versions, halved: the other half for samplers' lag
    assert credit_target(8, 1, 16, high_water=24) == 24
    assert credit_target(4, 1, 8, high_water=1000) == 32  # 4 groups x 8 versions: more would age out unused
    assert credit_target(4, 2, 8) == 32  # two steps per version
    assert credit_target(8, 1, 0) == 8 and credit_target(8, 1, 16, high_water=2) == 8  # at least one step


def test_the_target_grows_while_the_learner_waits_for_groups_and_falls_to_one_step_when_held_groups_age():
    held, behind = [0], [0]
    policy = CreditPolicy(8, 32, lambda: held[0], lambda: behind[0], aging=4)
    assert policy.target == 8
    policy.ready()  # too few for a step: more in flight
    policy.ready()  # still the same wait: grown once
    assert policy.target == 16
    held[0] = 30  # a surplus alone is fine: it is drawn in the next steps
    policy.ready()
    held[0] = 3
    policy.ready()  # a new wait
    assert policy.target == 24
    for _ in range(3):
        held[0] = 0
        policy.ready()
        held[0] = 8
        policy.ready()
    assert policy.target == 32  # the cap
    behind[0] = 5  # a held group 5 versions behind (> 4): the newest-first draw is passing it over
    policy.ready()
    assert policy.target == 8 and policy.full()  # one step's draw: nothing new until the old ones are drawn
    behind[0], held[0] = 2, 0
    policy.ready()
    assert policy.target == 16


def test_credits_share_the_room_below_the_target_among_the_senders_heard_recently():
    held, clock = [0], Clock()
    policy = CreditPolicy(8, 8, lambda: held[0], active_window=5.0, clock=clock)
    assert policy.grant("a") == 8 and not policy.full()  # alone: all the room
    assert policy.grant("b") == 4 and policy.grant("a") == 4  # two senders: half each
    held[0] = 5
    assert policy.grant("c") == 1  # 3 groups of room among three senders, rounded up
    held[0] = 8
    assert policy.full() and policy.grant("a") == 0
    held[0] = 12  # over the target (a batch that was admitted whole): no credit, never a negative one
    assert policy.grant("a") == 0
    held[0], clock.now = 2, clock.now + 6.0  # b and c went quiet: a gets the whole room again
    assert policy.grant("a") == 6 and policy.senders() == 1
    with pytest.raises(ValueError):
        CreditPolicy(0, 4, lambda: 0)
    with pytest.raises(ValueError):
        CreditPolicy(8, 4, lambda: 0)


@pytest.mark.parametrize(
    "ack, told",
    [
        ({"c": 3}, 3),
        ({"c": 0}, 0),
        ({}, None),
        ({"c": -1}, None),
        ({"c": True}, None),
        ({"c": "5"}, None),
        ({"c": 1 << 30}, None),
        ({"c": 2.0}, None),
    ],
)
def test_a_told_credit_is_a_small_non_negative_int_or_nothing(ack, told):
    assert told_credit(ack) == told


# ------------------------------------------------------------------------------------- the sampler's pacer
def test_with_credits_a_sampler_generates_what_is_invited_up_to_a_batch_or_a_one_group_probe():
    pacer = Pacer(batch=4)
    assert pacer.next_batch(outstanding=0, invited=None) == 4  # nothing told yet (or never): stop and wait
    assert pacer.next_batch(outstanding=4, invited=None) == 0  # ... no second batch before the acks
    assert pacer.next_batch(outstanding=4, invited=9) == 4  # invited more than a batch: a batch
    assert pacer.next_batch(outstanding=4, invited=3) == 0  # fewer, with groups outstanding: wait for more
    assert pacer.next_batch(outstanding=0, invited=3) == 3  # fewer, nothing outstanding: that many
    assert pacer.next_batch(outstanding=2, invited=0) == 0  # nothing invited: wait for the acks
    assert pacer.next_batch(outstanding=0, invited=0) == 1  # all acked, learner full: a probe it will hold
    assert (pacer.waits, pacer.probes) == (3, 1)
    with pytest.raises(ValueError):
        Pacer(batch=0)


def test_a_sampler_fetches_first_when_its_batch_would_arrive_beyond_the_bound():
    pacer = Pacer(batch=16)
    assert not pacer.stale_on_arrival(lag=8, max_staleness=16)  # half the bound, nothing moves during a batch
    assert pacer.stale_on_arrival(lag=9, max_staleness=16)
    pacer.batch_took(6)
    pacer.batch_took(6)  # the learners moved on ~4.5 versions per batch
    assert pacer.batch_versions == 4.5
    assert pacer.stale_on_arrival(lag=5, max_staleness=16)  # 5 + ~4 > 8: half the bound gone on arrival
    assert not pacer.stale_on_arrival(lag=4, max_staleness=16)
    assert not pacer.stale_on_arrival(lag=0, max_staleness=2)  # nothing newer to fetch: generate
    assert not Pacer(batch=16, credits=False, batch_versions=9.0).stale_on_arrival(lag=5, max_staleness=8)


def test_with_outbox_pacing_a_sampler_generates_full_batches_until_its_outbox_is_long():
    pacer = Pacer(batch=4, credits=False)
    assert pacer.next_batch(OUTBOX_LIMIT - 1, invited=0) == 4
    assert pacer.next_batch(OUTBOX_LIMIT, invited=100) == 0


# --------------------------------------------------------------- credits over real streams (two p2p daemons)
class Buffer:
    """The learner's buffer stand-in: accepts every group, holds it until the test draws."""

    def __init__(self) -> None:
        self.held: list[str] = []

    def __call__(self, group) -> str:
        self.held.append(group.group_id)
        return "ok"


@pytest.mark.usefixtures("starts_processes")
def test_acks_tell_the_credit_and_the_sender_knows_what_the_learner_invites(tmp_path):
    """A learner with a target of 6: the first pushes fill it, the acks tell credits down to 0 and the door says
    "full"; the sender's `invited` follows (its last credit minus what still waits); as the learner draws, the
    held groups go in and the credit comes back. A learner without credits tells none (`invited` None)."""
    sid = Identity.generate()
    buffer = Buffer()
    policy = CreditPolicy(6, 6, lambda: len(buffer.held))

    async def scenario():
        async with daemons(2, [sid, Identity.generate()], tmp_path) as (sp, lp):
            receiver = RolloutReceiver(RUN, buffer, LIMITS, full=policy.full, credit=policy.grant)
            await receiver.start(lp)
            groups = [make_group(sid, random.Random(3), "credit", i) for i in range(8)]
            sender = await pushing(sp, lp, groups, window=2, full_wait=0.01)
            await wait_for(lambda: len(buffer.held) == 6 and sender.pending == 2 and sender.statuses["full"] >= 1)
            assert sender.invited == 0
            del buffer.held[:6]  # the learner draws a step
            await wait_for(lambda: sender.pending == 0)
            await wait_for(lambda: sender.invited == 4)  # 6 - the 2 held ones that went in
            await sender.close()
            receiver.close()
            plain = RolloutReceiver(RUN + "-plain", Buffer(), LIMITS)  # no credit: acks tell none
            return sender, plain

    sender, plain = asyncio.run(scenario())
    assert sender.delivered == 8 and plain.credit is None


@pytest.mark.usefixtures("starts_processes")
def test_a_sender_answered_full_waits_what_the_ack_tells_before_it_pushes_again(tmp_path):
    """A learner whose door is shut tells a wait of 1 s in each "full" ack (`turn_wait`): the sender's pushes come
    at least that far apart (its own flat wait is 10 ms), and once the door opens the group goes in."""
    sid = Identity.generate()
    buffer = Buffer()
    door = {"shut": True}
    told_at: list[float] = []

    def turn_wait(peer: str) -> float:
        told_at.append(time.monotonic())
        return 1.0

    async def scenario():
        async with daemons(2, [sid, Identity.generate()], tmp_path) as (sp, lp):
            receiver = RolloutReceiver(RUN, buffer, LIMITS, full=lambda: door["shut"], turn_wait=turn_wait)
            await receiver.start(lp)
            sender = await pushing(sp, lp, [make_group(sid, random.Random(4), "told", 0)], window=1, full_wait=0.01)
            await wait_for(lambda: len(told_at) >= 3)
            door["shut"] = False
            await wait_for(lambda: sender.delivered == 1)
            await sender.close()
            receiver.close()

    asyncio.run(scenario())
    gaps = [b - a for a, b in zip(told_at, told_at[1:])]
    assert len(buffer.held) == 1 and gaps and min(gaps) >= 0.95, gaps  # flat, they would be ~10 ms apart


def test_a_sender_with_no_credit_told_invites_none():
    from swarmnode.swarm.rollout_push.send import RolloutSender, _Link

    sender = RolloutSender(SimpleNamespace(), RUN)
    assert sender.invited is None
    link = sender._links["x"] = _Link("x", 8)
    assert sender.invited is None
    link.credit = 5
    link.outbox.extend([("g", b"", 0.0)] * 2)
    assert sender.invited == 3 and link.invites() == 3


# ------------------------------------------------------------------ what the buffer throws away, and lengths
def group(gid: str, version: int, length: int, sampler: str = "s"):
    return SimpleNamespace(
        group_id=gid,
        sampler_id=sampler,
        policy_version=version,
        lineage="L",
        completions=[[0] * length, [0] * (length + 2)],
    )


def test_the_metered_buffer_records_each_fate_with_its_completion_length():
    buf = MeteredBuffer(capacity=16, max_staleness=2, lineage="L", version=5)
    assert buf.add(group("old", 2, 30)) == "stale"  # 3 behind a bound of 2
    assert buf.add(group("x", 5, 4)) == "ok" and buf.add(group("y", 4, 10)) == "ok"
    assert buf.add(SimpleNamespace(**{**vars(group("z", 5, 1)), "lineage": "other"})) == "lineage"
    assert [g.group_id for g in buf.draw(1)] == ["x"]
    buf.set_version(7)  # y (version 4) is now 3 behind: aged out
    out = buf.lengths.summary()
    assert out["stale"] == {"groups": 1, "mean_tokens": 31.0}
    assert out["drawn"] == {"groups": 1, "mean_tokens": 5.0}
    assert out["aged_out"] == {"groups": 1, "mean_tokens": 11.0}
    assert out["refused"] == {"groups": 1, "mean_tokens": 2.0}
    assert isinstance(
        MeteredBuffer.from_config(
            SimpleNamespace(
                learner=SimpleNamespace(buffer_size=4, per_sampler_quota=1.0, draw_order="newest"),
                sync=SimpleNamespace(max_staleness=3),
            )
        ),
        MeteredBuffer,
    )


def test_waste_between_two_step_records_counts_what_arrived_and_was_lost():
    earlier = {"buffer_counters": {"ok": 100, "stale": 5, "aged_out": 3, "duplicate": 7}}
    later = {"buffer_counters": {"ok": 190, "stale": 8, "aged_out": 5, "quota": 2, "duplicate": 50}}
    assert waste_between(earlier, later) == {"arrived": 95, "lost": 7, "waste": 7 / 95}
    assert waste_between(later, later)["waste"] == 0.0


# ------------------------------------------------------------------------------------ one staleness rule
@pytest.mark.parametrize("bound", [0, 1, 8])
def test_the_buffer_and_the_health_alerts_judge_staleness_by_the_one_rule(bound):
    for behind in range(0, bound + 3):
        buf = ReplayBuffer(capacity=4, max_staleness=bound, version=20)
        refused = buf.add(group(f"g{behind}", 20 - behind, 3)) == "stale"
        peers = [
            {"role": "learner", "peer_id": "L", "version": 20, "health": {"max_staleness": bound}},
            {"role": "sampler", "peer_id": "S", "version": 20 - behind, "health": {}},
        ]
        alerted = any(a["kind"] == "too_stale" for a in find_alerts(peers, bound))
        assert refused == alerted == too_stale(behind, bound) == (behind > bound), (behind, bound)
