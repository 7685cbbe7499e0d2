"""The one backoff: delays that double up to a cap, with equal jitter or exactly (`jitter=False`), and that never
overflow however many failures a long-lived retry loop counts."""

from __future__ import annotations

import random

from swarmnode.backoff import Backoff


def test_without_jitter_the_delays_double_exactly_up_to_the_cap_and_success_starts_over():
    backoff = Backoff(0.5, 5.0, jitter=False)
    assert [backoff.failure() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff.delay == 5.0 and not backoff.ready()
    backoff.success()
    assert backoff.delay == 0.0 and backoff.ready() and backoff.failure() == 0.5


def test_with_jitter_each_delay_lies_in_the_upper_half_of_its_ceiling_even_after_thousands_of_failures():
    backoff = Backoff(0.05, 5.0, rng=random.Random(3))
    delays = [backoff.failure() for _ in range(3000)]
    assert 0.025 <= delays[0] <= 0.05 and 0.05 <= delays[1] <= 0.1
    assert all(2.5 <= d <= 5.0 for d in delays[10:])
