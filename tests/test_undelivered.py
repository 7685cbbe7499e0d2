"""A sampler that cannot deliver stops generating after a bounded number of groups (`sampler.undelivered`): the
guard's counting, its probes and resets, and the line it prints for each cause."""

from __future__ import annotations

from collections import Counter

from swarmnode.sampler.undelivered import DeliveryGuard, Evidence, stop_line, undelivered_limit, why_undelivered


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_guard_stops_after_the_limit_probes_with_backoff_and_an_ack_ends_the_stop():
    clock = Clock()
    guard = DeliveryGuard(limit=8, probe_s=30.0, probe_cap_s=60.0, clock=clock)
    made = 0
    while guard.allow(made, acked=0):
        made += 4
    assert made == 8 and guard.stopped and guard.stops == 1  # two batches of 4, none acked
    clock.t = 29.0
    assert not guard.allow(made, 0) and guard.next_try_s() == 1.0
    clock.t = 30.0
    assert guard.allow(made, 0)  # one probe batch
    made += 4
    assert not guard.allow(made, 0) and guard.next_try_s() == 60.0  # doubled, capped at 60
    clock.t = 91.0
    assert guard.allow(made, 0)
    made += 4
    assert guard.allow(made, acked=1) and not guard.stopped  # acknowledged: generating again
    assert guard.allow(made + 7, 1) and not guard.allow(made + 8, 1)  # a full limit since the ack
    assert guard.stops == 2


def test_a_reset_gives_a_new_version_or_new_learners_a_full_limit():
    guard = DeliveryGuard(limit=8, clock=Clock())
    assert not guard.allow(8, 0)
    guard.reset(8)
    assert guard.allow(8, 0) and guard.allow(15, 0) and not guard.allow(16, 0)


def test_the_limit_covers_more_than_a_window_of_outstanding_groups():
    assert undelivered_limit(4) == 128 and undelivered_limit(64) == 256


def test_each_cause_gets_its_line_and_short_reason():
    refused = Evidence(
        made=128,
        statuses=Counter(lineage=120, ok=0),
        learners=1,
        version_loaded=False,
        fetch_error="fetching version 0 failed (no valid manifest for version 0: ...)",
    )
    line, short = why_undelivered(refused)
    assert short == "undelivered: refused (lineage)" and len(short) < 128
    assert "lineage 120" in line and "no version of the learner is loaded" in line and "fetching version 0" in line
    silent = Evidence(
        made=128,
        statuses=Counter(),
        learners=1,
        version_loaded=True,
        push_error="push to abcdefgh: TimeoutError",
        use_relay=False,
    )
    line, short = why_undelivered(silent)
    assert short == "undelivered: no learner answered" and "TimeoutError" in line
    assert "network.use_relay=true" in line
    assert "relay_service" in why_undelivered(Evidence(128, Counter(), 1, True))[0]
    assert stop_line(refused, 30.0).startswith("sampler: stopped generating: 128 groups made and none acknowledged")
