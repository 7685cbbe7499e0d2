"""A door strangers cannot hold (`CreditPolicy` with `probation`, `settle`; issue #57): keys on probation queue
apart from the established senders and share a bounded part of the room; a turn is taken only by a kept group; a
refusal the sender earned moves it back. With a simulated clock: an established sampler and 80 throwaway keys each
pushing a group the learner refuses (a future version) every 4 s."""

from __future__ import annotations

from clock_helpers import Clock

from swarmnode.swarm.rollout_push.credit import CreditPolicy, counts_against

DRAW, TICK_S, STEP_S = 8, 0.05, 0.4


def flood_run(flood: int, seconds: float = 60.0, probation: bool = True) -> tuple[int, float]:
    """(groups the learner drew, the honest sampler's seconds spent held "full") with `flood` throwaway keys each
    pushing a refused group every 4 s, one established honest sampler pushing whenever it holds credit (a batch
    of 8 a tick at most) and a learner drawing `DRAW` groups every `STEP_S` s while it holds them."""
    clock, held = Clock(), [0]
    policy = CreditPolicy(
        DRAW,
        4 * DRAW,
        lambda: held[0],
        clock=clock,
        probation=(lambda peer: peer.startswith("x")) if probation else (lambda peer: False),
    )
    drawn, honest_full, next_step, credit = 0, 0.0, STEP_S, 1
    push_at = {f"x{i}": (i % 80) * 0.05 for i in range(flood)}
    while clock.now < seconds:
        for key, at in push_at.items():
            if at <= clock.now:
                push_at[key] = clock.now + 4.0
                if not policy.full() and policy.in_turn(key):
                    policy.settle(key, kept=False, against=counts_against("future", probation))
                policy.grant(key)
        sent = 0
        while sent < max(1, credit) and sent < 8:
            if policy.full() or not policy.in_turn("honest"):
                honest_full += TICK_S
                credit = policy.grant("honest")
                break
            held[0] += 1
            policy.settle("honest", kept=True)
            credit = policy.grant("honest")
            sent += 1
        if clock.now >= next_step:
            policy.ready()
            if held[0] >= DRAW:
                held[0] -= DRAW
                drawn += DRAW
            next_step += STEP_S
        clock.now += TICK_S
    return drawn, honest_full


def test_a_throwaway_key_flood_leaves_the_learner_at_its_calm_pace():
    calm, calm_full = flood_run(0)
    flooded, flooded_full = flood_run(80)
    assert flooded >= 0.8 * calm, (calm, flooded)
    assert flooded_full <= calm_full + 6.0, (calm_full, flooded_full)  # held "full" as often as when calm
    unqueued, _ = flood_run(80, probation=False)  # the same flood with every key in one queue
    assert unqueued < 0.1 * calm, (calm, unqueued)


def test_keys_on_probation_share_a_bounded_part_of_the_room_behind_the_established():
    clock = Clock()
    policy = CreditPolicy(8, 8, lambda: 0, clock=clock, probation=lambda peer: peer.startswith("x"))
    policy.grant("honest")
    for i in range(80):
        policy.grant(f"x{i}")
    assert policy.in_turn("honest") and policy.grant("honest") == 6  # 8 of room, 2 of it for the 80 on probation
    assert sum(policy.grant(f"x{i}") for i in range(80)) == 2  # credit 1 for the two in turn, 0 for the rest
    alone = CreditPolicy(8, 8, lambda: 0, clock=clock, probation=lambda peer: True)
    for i in range(4):
        alone.grant(f"x{i}")
    assert sum(alone.grant(f"x{i}") for i in range(4)) == 8  # nobody established: the newcomers are the run


def test_a_turn_is_taken_by_a_kept_group_and_a_refusal_the_sender_earned_moves_it_back():
    clock = Clock()
    policy = CreditPolicy(1, 1, lambda: 0, clock=clock)
    for p in ("a", "b"):
        policy.grant(p)
    assert policy.in_turn("a")
    policy.settle("a", kept=False)  # refused for the learner's reasons (busy, a duplicate): a keeps its place
    assert policy.in_turn("a")
    policy.settle("a", kept=False, against=True)  # a future version: its turn is gone
    assert not policy.in_turn("a") and policy.in_turn("b")
    policy.settle("b", kept=True)
    assert policy.in_turn("a") and policy.kept == 1
    policy.forget("a")  # banned: out of the queue
    assert policy.senders() == 1


def test_which_refusals_count_against_a_key():
    assert counts_against("future", False) and counts_against("invalid", False)
    assert counts_against("stale", True) and not counts_against("stale", False)  # an established sampler may lag
    assert not any(counts_against(s, True) for s in ("duplicate", "busy", "quota", "settings", "ok"))
