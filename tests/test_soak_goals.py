"""The churn soak's (bench/soak) schedule and verdicts: the fault plan is seeded and keeps its promises, and the
CI check fails on a lost acknowledged group, a version going back, or an RSS slope well above the goal."""

from __future__ import annotations

import sys
from pathlib import Path

SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak"
sys.path.insert(0, str(SOAK))

import faults  # noqa: E402
import report  # noqa: E402


def test_the_schedule_is_seeded_and_never_hits_a_node_twice_at_once():
    plan = faults.scaled_plan(900)
    one, again = faults.schedule(44, 900, plan), faults.schedule(44, 900, plan)
    assert [f.as_dict() for f in one] == [f.as_dict() for f in again]
    kinds = {f.kind for f in one}
    assert {"sampler_kill", "learner_kill", "freeze", "net_cut", "disk_full", "bootstrap_kill"} <= kinds
    assert all(f.end <= 900 - 120 for f in one)
    for name in plan.churn:
        windows = sorted((f.at, f.end) for f in one if f.target == name)
        assert all(a_end <= b_at for (_, a_end), (b_at, _) in zip(windows, windows[1:])), (name, windows)
    assert plan.frozen not in plan.churn  # the long-lived samplers that measure the slope


def run(samples, *, journal=10, offered=10, minutes=15.0):
    """A soak document of `samples` rows (node, life, t, age, rss, version) and one learner kill."""
    return {"args": {"minutes": minutes}, "t_ready": 0.0, "t0_wall": 0.0, "samples": samples, "events": [],
            "faults": [], "heldout": [], "steps": [], "replays": [{"life": 1}, {"life": 2, "offered": {"ok": offered}}],
            "journal_at_kill": [{"t": 100.0, "life": 1, "journal": journal}], "p2pds_left": []}


def flat(node="sampler1", rss_per_s=0.0, versions=None):
    return [{"node": node, "life": 1, "t": float(t), "age": float(t), "rss": 400 + rss_per_s * t,
             "version": (versions or {}).get(t, t // 10)} for t in range(0, 901, 10)]


def test_a_clean_run_passes_the_ci_check():
    assert report.goals(run(flat()))["summary"]["ci_pass"]


def test_a_lost_acknowledged_group_fails_it():
    summary = report.goals(run(flat(), journal=10, offered=9))["summary"]
    assert summary["acked_lost"] == 1 and not summary["ci_pass"]


def test_a_version_going_back_fails_it():
    summary = report.goals(run(flat(versions={500: 3})))["summary"]
    assert summary["versions_back"] == 1 and not summary["ci_pass"]


def test_an_rss_slope_well_above_the_goal_fails_it():
    summary = report.goals(run(flat(rss_per_s=30 / 3600)))["summary"]  # 30 MB/h
    assert summary["worst_rss_slope_mb_h"] == 30.0 and not summary["ci_pass"]
    assert report.goals(run(flat(rss_per_s=4 / 3600)))["summary"]["rss_goal_met"]
