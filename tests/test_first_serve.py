"""First serves (`swarm/weights/first_serve.py`): a chunk just sent to one fetcher is "not yet" to the others for
`hold_s`, never to the first receiver itself, and free again once the hold is over."""

from __future__ import annotations

from swarmnode.swarm.weights.first_serve import FirstServes


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_chunk_just_sent_is_not_yet_to_others_and_free_after_the_hold() -> None:
    clock = Clock()
    serves = FirstServes(hold_s=1.0, clock=clock)
    assert not serves.defer("c1", "a")  # nobody had it: a's first serve
    serves.served("c1", "a")
    assert not serves.defer("c1", "a")  # the first receiver asking again is served
    assert serves.defer("c1", "b") and serves.defer("c1", "c")  # the others: "not yet", take it from a
    assert not serves.defer("c2", "b")  # another chunk is b's first serve
    clock.now += 1.0
    assert not serves.defer("c1", "b")  # the hold is over
    serves.served("c1", "b")  # ... and b's serve starts the next hold
    assert serves.defer("c1", "c") and not serves.defer("c1", "b")
    assert serves.deferred == 3


def test_a_serve_during_a_hold_does_not_restart_it_and_memory_is_bounded() -> None:
    clock = Clock()
    serves = FirstServes(hold_s=1.0, clock=clock, memory=2)
    serves.served("c1", "a")
    clock.now += 0.6
    serves.served("c1", "a")  # a again, within its hold: the hold still ends 1 s after the first
    clock.now += 0.5
    assert not serves.defer("c1", "b")
    serves.served("c2", "a")
    serves.served("c3", "a")  # c1 is forgotten: a third chunk in a memory of two
    assert not serves.defer("c1", "b") and serves.defer("c3", "b")


def test_a_strangers_first_serve_holds_strangers_only() -> None:
    clock = Clock()
    serves = FirstServes(hold_s=1.0, clock=clock)
    serves.served("c1", "stranger", trusted=False)
    assert not serves.defer("c1", "sampler", trusted=True)  # a flood racing for first serves cannot hold it
    assert serves.defer("c1", "another stranger", trusted=False)
    serves.served("c1", "sampler", trusted=True)  # the trusted serve takes over the hold
    assert serves.defer("c1", "sampler2", trusted=True)
    serves.served("c1", "stranger", trusted=False)  # ... and a stranger's serve does not end it
    assert serves.defer("c1", "sampler2", trusted=True)


def test_a_hold_lasts_while_the_first_receiver_fetches_at_most_max_hold() -> None:
    clock = Clock()
    serves = FirstServes(hold_s=1.0, max_hold_s=10.0, clock=clock)
    serves.opened("a")
    serves.served("c1", "a")
    clock.now += 5.0
    assert serves.defer("c1", "b")  # a is still fetching: it passes c1 on
    serves.closed("a")
    assert not serves.defer("c1", "b")  # a is done: c1 is free again
    serves.opened("b")
    serves.served("c2", "b")
    clock.now += 10.0
    assert not serves.defer("c2", "c")  # a first receiver that never stops fetching holds others 10 s at most
