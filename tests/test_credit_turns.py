"""Credits by turns: more samplers than a learner's step can take share it fairly (`CreditPolicy.in_turn`), with a
simulated clock (no network): a learner drawing 4 groups a second, 120 samplers each holding a one-group probe
and resending it every 0.25 s while it is answered "full", the same samplers always resending first."""

from __future__ import annotations

from swarmnode.swarm.rollout_push.credit import CreditPolicy

STEP_S, TICK_S, DRAW = 1.0, 0.25, 4


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def longest_wait(samplers: int, minutes: float, turns: bool) -> tuple[float, int]:
    """(the longest any sampler went without a trained group, groups trained) over `minutes` simulated."""
    clock, held = Clock(), []
    policy = CreditPolicy(DRAW, DRAW, lambda: len(held), active_window=5.0, clock=clock)
    last_trained = {s: 0.0 for s in range(samplers)}
    waiting = set(range(samplers))  # samplers whose probe is not in the learner's buffer
    longest, trained, next_step = 0.0, 0, STEP_S
    while clock.now < 60 * minutes:
        for s in sorted(waiting):  # a fixed order: sampler 0 always resends first (the closest one)
            peer = f"sampler-{s}"
            if policy.full() or (turns and not policy.in_turn(peer)):
                policy.grant(peer)  # the "full" ack tells it a credit too
                continue
            held.append(s)
            waiting.discard(s)
            policy.grant(peer)
        if clock.now >= next_step:  # the learner draws a step
            policy.ready()
            for s in held[:DRAW]:
                longest = max(longest, clock.now - last_trained[s])
                last_trained[s] = clock.now
                trained += 1
                waiting.add(s)
            del held[:DRAW]
            next_step += STEP_S
        clock.now += TICK_S
    longest = max([longest, *(clock.now - t for t in last_trained.values())])
    return longest, trained


def test_with_turns_no_sampler_waits_more_than_two_minutes_for_a_trained_group():
    longest, trained = longest_wait(120, 5.0, turns=True)
    assert longest <= 120.0, longest  # 120 samplers / 4 a step: each about every 30 steps
    assert trained >= 0.95 * DRAW * 5 * 60  # the learner never waits for groups meanwhile


def test_without_turns_the_first_to_resend_win_every_step():
    longest, trained = longest_wait(120, 5.0, turns=False)
    assert longest >= 299.0  # the samplers at the back of the race never had a group trained
    assert trained >= 0.95 * DRAW * 5 * 60


def test_turns_change_nothing_while_the_room_covers_every_sender():
    clock = Clock()
    policy = CreditPolicy(8, 8, lambda: 0, clock=clock)
    assert all(policy.in_turn(p) for p in "abcd") and policy.grant("a") == 2  # 8 groups of room, 4 senders
    held = [8]
    full = CreditPolicy(8, 8, lambda: held[0], clock=clock)
    assert not full.in_turn("a") and full.grant("a") == 0  # no room: nobody's turn


def test_a_sender_is_invited_only_on_its_turn_and_a_new_one_goes_first():
    clock = Clock()
    policy = CreditPolicy(2, 2, lambda: 0, clock=clock)
    for p in ("a", "b", "c"):
        policy.grant(p)  # three senders heard, two groups of room
    assert policy.in_turn("a") and policy.in_turn("b")  # admitted: their turns are taken
    assert policy.grant("c") == 1 and policy.grant("b") == 0  # c has waited longest, then a; b was served last
    assert policy.in_turn("c")
    policy.grant("d")  # a newcomer was never served: its turn comes before those served already
    assert not policy.in_turn("b") and policy.in_turn("d")
