"""Credits by turns: more samplers than a learner's step can take share it fairly (`CreditPolicy.in_turn`), with a
simulated clock (no network): a learner drawing 4 groups a second, 120 samplers each holding a one-group probe
and resending it every 0.25 s while it is answered "full" (or after the wait the "full" answer tells,
`CreditPolicy.turn_wait`), the same samplers always resending first."""

from __future__ import annotations

from clock_helpers import Clock

from swarmnode.swarm.rollout_push.credit import MAX_TURN_WAIT_S, CreditPolicy, told_wait

STEP_S, TICK_S, DRAW = 1.0, 0.25, 4


def longest_wait(samplers: int, minutes: float, turns: bool, told: bool = False) -> tuple[float, int, int]:
    """(the longest any sampler went without a trained group, groups trained, pushes answered "full") over
    `minutes` simulated; with `told`, a sampler answered "full" resends after the wait it is told."""
    clock, held = Clock(), []
    policy = CreditPolicy(DRAW, DRAW, lambda: len(held), active_window=5.0, clock=clock)
    last_trained = {s: 0.0 for s in range(samplers)}
    waiting = set(range(samplers))  # samplers whose probe is not in the learner's buffer
    resend_at = {s: 0.0 for s in range(samplers)}
    longest, trained, refused, next_step = 0.0, 0, 0, STEP_S
    while clock.now < 60 * minutes:
        for s in sorted(waiting):  # a fixed order: sampler 0 always resends first (the closest one)
            if resend_at[s] > clock.now:
                continue
            peer = f"sampler-{s}"
            if policy.full() or (turns and not policy.in_turn(peer)):
                policy.grant(peer)  # the "full" ack tells it a credit too
                refused += 1
                resend_at[s] = clock.now + (policy.turn_wait(peer) if told else 0.0)
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
    return longest, trained, refused


def test_with_turns_no_sampler_waits_more_than_two_minutes_for_a_trained_group():
    longest, trained, _ = longest_wait(120, 5.0, turns=True)
    assert longest <= 120.0, longest  # 120 samplers / 4 a step: each about every 30 steps
    assert trained >= 0.95 * DRAW * 5 * 60  # the learner never waits for groups meanwhile


def test_without_turns_the_first_to_resend_win_every_step():
    longest, trained, _ = longest_wait(120, 5.0, turns=False)
    assert longest >= 299.0  # the samplers at the back of the race never had a group trained
    assert trained >= 0.95 * DRAW * 5 * 60


def test_turns_change_nothing_while_the_room_covers_every_sender():
    clock = Clock()
    policy = CreditPolicy(8, 8, lambda: 0, clock=clock)
    assert all(policy.in_turn(p) for p in "abcd") and policy.grant("a") == 2  # 8 groups of room, 4 senders
    held = [8]
    full = CreditPolicy(8, 8, lambda: held[0], clock=clock)
    assert not full.in_turn("a") and full.grant("a") == 0  # no room: nobody's turn


def test_a_sender_is_invited_only_on_its_turn_and_a_new_one_is_never_served_first():
    clock = Clock()
    policy = CreditPolicy(2, 2, lambda: 0, clock=clock)
    for p in ("a", "b", "c"):
        policy.grant(p)  # three senders heard, two groups of room
    assert policy.in_turn("a") and policy.in_turn("b")  # admitted: their turns are taken
    assert policy.grant("c") == 1 and policy.grant("b") == 0  # c has waited longest, then a; b was served last
    assert policy.in_turn("c")
    policy.grant("d")  # a newcomer queues behind those heard before it, not ahead of them
    assert not policy.in_turn("d") and policy.in_turn("a") and policy.in_turn("b")
    assert policy.in_turn("d")  # then its turn comes: before a and b, served after it was first heard


def test_a_told_wait_keeps_the_turns_fair_and_the_refused_pushes_do_not_grow_with_the_samplers():
    longest, trained, refused = longest_wait(120, 5.0, turns=True, told=True)
    assert longest <= 120.0, longest
    assert trained >= 0.95 * DRAW * 5 * 60  # the learner never waits for groups meanwhile
    few, many = longest_wait(30, 5.0, turns=True, told=True)[2], longest_wait(240, 5.0, turns=True, told=True)[2]
    flat_few, flat_many = longest_wait(30, 5.0, turns=True)[2], longest_wait(240, 5.0, turns=True)[2]
    assert flat_many >= 6 * flat_few  # resent every 0.25 s: the "full" answers grow with the samplers waiting
    assert many <= 2 * few and many <= flat_many / 10, (few, many, flat_few, flat_many)  # about log2 of them


def test_the_told_wait_grows_with_the_place_in_the_queue_and_keeps_the_sender_heard():
    clock, held = Clock(), [8]
    policy = CreditPolicy(8, 8, lambda: held[0], active_window=5.0, clock=clock)
    for p in range(64):
        policy.grant(f"s{p}")
    assert policy.turn_wait("s63") == 0.0  # the step interval is not known yet: no told wait
    policy.ready()
    clock.now = 2.0
    policy.ready()  # a step every 2 s
    assert policy.turn_wait("s0") == 0.0 and policy.turn_wait("s7") == 0.0  # the next step's draw: at once
    assert policy.turn_wait("s8") == 0.5 * 1 * 2.0  # one step's draw ahead of it: half a step's interval
    assert policy.turn_wait("s63") == 0.5 * 7 * 2.0
    clock.now = 2.0 + 6.5  # past the active window, within its told wait
    assert policy.senders() == 1 and "s63" in policy._heard  # the others were forgotten; it was told to wait
    held[0] = 0  # room for 8: a sender 7 steps back is now 6 away
    assert policy.turn_wait("s63") == 0.0  # alone in the queue now


def test_a_told_wait_is_read_from_the_ack_within_bounds():
    assert told_wait({"status": "full", "w": 2.5}) == 2.5 and told_wait({"status": "full"}) == 0.0
    assert told_wait({"w": -1}) == 0.0 and told_wait({"w": True}) == 0.0 and told_wait({"w": "5"}) == 0.0
    assert told_wait({"w": MAX_TURN_WAIT_S + 1}) == 0.0


def test_the_step_interval_counts_steps_not_waits_for_data():
    clock, held = Clock(), [8]
    policy = CreditPolicy(8, 8, lambda: held[0], clock=clock)
    policy.ready()
    clock.now = 1.0
    held[0] = 0  # the next call finds too few groups: the learner waits for data
    policy.ready()
    clock.now = 9.0
    held[0] = 8
    policy.ready()  # 8 s of waiting: not a step's time
    clock.now = 10.0
    policy.ready()
    assert policy.step_s == 1.0
