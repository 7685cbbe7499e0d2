"""bench/swarm-speedup/swarm_model.py: the swarm's steps/s and time to target predicted from measured parts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "swarm-speedup"))

from swarm_model import local_steps_per_s, predict, swarm_steps_per_s  # noqa: E402


def test_a_sampler_as_fast_as_the_learner_leaves_it_nothing_to_generate():
    # 100 ms steps, a sampler making a step's groups every 100 ms: the learner only trains, 10 steps/s
    assert swarm_steps_per_s(100, 150, 87, learner_overhead_ms=0, sampler_overhead_ms=13) == pytest.approx(10.0)
    assert swarm_steps_per_s(100, 150, 10, learner_overhead_ms=0, sampler_overhead_ms=0) == pytest.approx(10.0)


def test_a_slow_sampler_is_topped_up_by_the_learners_own_batches():
    # sampler: 5 steps' worth a second; learner: r*100 + (r - 5)*150 = 1000 -> r = 7
    assert swarm_steps_per_s(100, 150, 200, learner_overhead_ms=0, sampler_overhead_ms=0) == pytest.approx(7.0)
    # with no sampler at all it is the single process
    assert swarm_steps_per_s(100, 150, 1e12, 0, 0) == pytest.approx(local_steps_per_s(150, 100))


def test_interference_costs_the_swarm_and_not_the_single_process():
    summary = {"generate_ms": {"idle": 150.0, "busy": 180.0}, "train_ms": {"idle": 120.0, "busy": 130.0}}
    rows = predict(summary, steps=100, start=4.0, swarm_start=4.0, learner_overhead=0, sampler_overhead=0)
    assert rows["train-local"]["speed_up"] == 1.0
    independent, slowed = rows["swarm, independent cores"], rows["swarm, cores slowing each other"]
    assert independent["steps_ratio"] == pytest.approx(2.0, abs=1e-3)  # generation and training each on a core
    assert 1.0 < slowed["speed_up"] < independent["speed_up"] < independent["steps_ratio"]  # start-up dilutes it
