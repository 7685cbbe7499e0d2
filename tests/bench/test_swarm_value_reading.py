"""How bench/swarm-speedup/swarm_value.py reads the time to a held-out target off a curve of evaluations."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "swarm-speedup"
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


def _doc(target: float, local: list[list[float]], swarm: list[list[float]]) -> dict:
    """A swarm_value results document: repeats of `local` and `warm-pull` curves (2 s apart) and a target."""
    return {
        "target": target,
        "arms": {
            "local": [{"heldout": _curve(c)} for c in local],
            "warm-pull": [{"heldout": _curve(c)} for c in swarm],
        },
    }


def test_pooling_reads_every_repeat_against_its_own_runs_target():
    from swarm_value_pool import pool

    slow, fast = [0.2, 0.4, 0.6, 0.8, 0.8, 0.8], [0.2, 0.6, 0.8, 0.8, 0.8, 0.8]
    docs = {
        "a": _doc(0.7, [slow, slow], [fast, fast]),  # trailing means reach 0.7 at t=8 (local), t=6 (swarm)
        "b": _doc(0.75, [slow], [fast, [0.2, 0.2, 0.2, 0.2, 0.2, 0.2]]),
    }  # a repeat that never gets there
    result = pool(docs, "warm-pull", ["local", "local-busy"])
    assert result["runs"]["a"]["local"][""] == round(8.0 / 6.0, 3)
    assert "local-busy" not in result["runs"]["a"]  # no such arm in the run: not compared
    # b: local 10 s ((0.8+0.8+0.8)/3 first reaches 0.75 at t=10), swarm [8 s, never]: the median is not reached
    assert result["runs"]["b"]["local"][""] is None
    pooled = result["pooled"]["local"]
    assert pooled["repeats"] == [3, 4]
    assert pooled[""] == round(8.0 / 7.0, 3)  # local [8, 8, 10] -> 8; swarm [6, 6, 8, never] -> 7
    assert "local-busy" not in result["pooled"]


def test_pooling_pairs_each_comparison_by_run():
    from swarm_value_pool import pool

    slow, fast = [0.2, 0.4, 0.6, 0.8, 0.8, 0.8], [0.2, 0.6, 0.8, 0.8, 0.8, 0.8]
    with_busy = _doc(0.7, [slow], [fast])
    with_busy["arms"]["local-busy"] = [{"heldout": _curve([0.2, 0.3, 0.4, 0.6, 0.8, 0.8])}]  # t=10
    docs = {"a": with_busy, "b": _doc(0.7, [slow], [[0.2, 0.2, 0.2, 0.6, 0.8, 0.8]])}  # swarm t=10 in b
    result = pool(docs, "warm-pull", ["local", "local-busy"])
    assert result["pooled"]["local-busy"]["repeats"] == [1, 1]  # b's slow swarm repeat is not in this comparison
    assert result["pooled"]["local-busy"][""] == round(10.0 / 6.0, 3)
    assert result["pooled"]["local"]["repeats"] == [2, 2]


def test_the_pooled_interval_resamples_whole_runs():
    from swarm_value_pool import pool

    slow, fast = [0.2, 0.4, 0.6, 0.8, 0.8, 0.8], [0.2, 0.6, 0.8, 0.8, 0.8, 0.8]  # first: t=8 and t=6
    same = {f"r{i}": _doc(0.7, [slow, slow], [fast, fast]) for i in range(3)}
    result = pool(same, "warm-pull", ["local"], draws=200, goal=1.3)
    pooled = result["pooled"]["local"]
    assert pooled["runs"] == 3
    assert pooled["interval"][""] == [round(8.0 / 6.0, 3)] * 2  # every run alike: nothing to spread
    assert pooled["runs_at_goal"][""] == 3

    mixed = {"a": _doc(0.7, [slow], [fast]), "b": _doc(0.7, [slow], [slow])}  # 1.333x and 1x
    result = pool(mixed, "warm-pull", ["local"], draws=200, goal=1.3)
    low, high = result["pooled"]["local"]["interval"][""]
    assert low == 1.0 and high == round(8.0 / 6.0, 3)  # drawing "b" twice / "a" twice
    assert result["pooled"]["local"]["runs_at_goal"][""] == 1


def test_one_run_has_no_interval():
    from swarm_value_pool import pool

    slow, fast = [0.2, 0.4, 0.6, 0.8, 0.8, 0.8], [0.2, 0.6, 0.8, 0.8, 0.8, 0.8]
    result = pool({"a": _doc(0.7, [slow], [fast])}, "warm-pull", ["local"], draws=100)
    assert result["pooled"]["local"]["interval"][""] is None
    assert "runs_at_goal" not in result["pooled"]["local"]


def test_after_the_first_step_leaves_each_repeats_start_up_out():
    from swarm_value_pool import pool

    slow, fast = [0.2, 0.4, 0.6, 0.8, 0.8, 0.8], [0.2, 0.6, 0.8, 0.8, 0.8, 0.8]  # first: t=8 and t=6
    doc = _doc(0.7, [slow], [fast])
    doc["arms"]["local"][0]["first_step_s"] = 2.0
    doc["arms"]["warm-pull"][0]["first_step_s"] = 3.0  # the swarm's learner starts later
    assert pool({"a": doc}, "warm-pull", ["local"])["pooled"]["local"][""] == round(8.0 / 6.0, 3)
    assert pool({"a": doc}, "warm-pull", ["local"], after_first_step=True)["pooled"]["local"][""] == 2.0  # 6 / 3
