"""How bench/swarm_value.py reads the time to a held-out target off a curve of evaluations."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from swarm_value import first_time_at  # noqa: E402


def _curve(rewards: list[float], spacing: float = 2.0) -> list[dict]:
    """The untrained start at t=0, then one evaluation every `spacing` seconds."""
    return [{"step": 5 * i, "t": spacing * i, "eval_reward": r} for i, r in enumerate(rewards)]


def test_the_first_evaluation_whose_trailing_mean_reaches_the_target():
    points = _curve([0.2, 0.4, 0.6, 0.8, 0.8, 0.8])
    assert first_time_at(points, 0.7) == 8.0  # (0.6+0.8+0.8)/3 at t=8; the single 0.8 at t=6 is not enough
    assert first_time_at(points, 0.9) is None


def test_a_centered_mean_does_not_lag_the_crossing():
    points = _curve([0.2, 0.4, 0.6, 0.8, 0.8, 0.8])
    assert first_time_at(points, 0.7, centered=True) == 6.0  # (0.6+0.8+0.8)/3 around t=6


def test_interpolation_places_the_crossing_between_evaluations():
    points = _curve([0.2, 0.3, 0.5, 0.9, 0.9, 0.9], spacing=4.0)
    # centered means: t=4 0.333, t=8 0.567, t=12 0.767; 0.7 is two thirds of the way from t=8 to t=12
    assert first_time_at(points, 0.7, centered=True) == 12.0
    assert first_time_at(points, 0.7, centered=True, interpolate=True) == 10.67


def test_interpolation_never_reaches_back_to_the_untrained_start():
    points = _curve([0.2, 0.9, 0.9, 0.9])
    assert first_time_at(points, 0.5, centered=True, interpolate=True) == 2.0
