"""The churn soak's (bench/soak) schedule and verdicts: the fault plan is seeded and keeps its promises, and the
CI check fails on a lost acknowledged group, a version going back, or an RSS slope well above the goal."""

from __future__ import annotations

import sys
from pathlib import Path

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak"
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
    return {
        "args": {"minutes": minutes, "config": "tiny-cpu", "sets": []},
        "t_ready": 0.0,
        "t0_wall": 0.0,
        "samples": samples,
        "events": [],
        "faults": [],
        "heldout": [],
        "steps": [],
        "replays": [{"life": 1}, {"life": 2, "offered": {"ok": offered}}],
        "journal_at_kill": [{"t": 100.0, "life": 1, "journal": journal}],
        "p2pds_left": [],
    }


def flat(node="sampler1", rss_per_s=0.0, versions=None):
    return [
        {
            "node": node,
            "life": 1,
            "t": float(t),
            "age": float(t),
            "rss": 400 + rss_per_s * t,
            "version": (versions or {}).get(t, t // 10),
        }
        for t in range(0, 901, 10)
    ]


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


def sending(node: str, sent_at: list[int], *, until: int = 900) -> list[dict]:
    """Samples of one sampler life whose `sent` counter rises at each time of `sent_at`."""
    return [
        {
            "node": node,
            "life": 1,
            "t": float(t),
            "age": float(t),
            "rss": 400.0,
            "version": t // 10,
            "sent": float(sum(1 for x in sent_at if x <= t)),
        }
        for t in range(0, until + 1, 10)
    ]


def test_a_sampler_that_sends_late_after_a_fault_is_late():
    doc = run([*flat("learner"), *sending("sampler1", [0, 50, 400])])
    doc["faults"] = [{"at": 60.0, "end": 100.0, "kind": "sampler_kill", "target": "sampler2"}]
    (row,) = report.sampler_resume(doc)
    assert row["sampler"] == "sampler1" and row["resume_s"] == 300.0
    assert report.goals(doc)["summary"]["late_resumes"] == 1


def test_a_sampler_frozen_meanwhile_is_judged_from_its_own_fault():
    doc = run([*flat("learner"), *sending("sampler1", [0, 50, 400])])
    doc["faults"] = [
        {"at": 60.0, "end": 100.0, "kind": "sampler_kill", "target": "sampler2"},
        {"at": 150.0, "end": 390.0, "kind": "freeze", "target": "sampler1"},
    ]
    rows = report.sampler_resume(doc)
    assert [(r["fault"], r["resume_s"]) for r in rows] == [("freeze", 10.0)]  # not 300 s late after the kill


def stepping(rates: list[tuple[float, float, float]]) -> list[dict]:
    """The learner's steps file: `rate` steps a second over each (from, to, rate) stretch."""
    out = []
    for begin, end, rate in rates:
        out += [{"time": begin + i / rate} for i in range(int((end - begin) * rate))] if rate else []
    return out


def test_recovery_is_judged_against_the_rate_before_each_fault_not_the_runs_median():
    """The rate halves as the task is solved: a fault in the slow half that costs nothing is recovered at once,
    though against the run's median rate it never would be."""
    doc = run(flat(), minutes=30)
    doc["steps"] = stepping([(0, 1200, 2.0), (1200, 1800, 1.0)])
    doc["faults"] = [{"at": 1500.0, "end": 1510.0, "kind": "sampler_kill", "target": "sampler3"}]
    rec = report.recoveries(doc, report.step_rate(doc), 300)
    (row,) = rec["faults"]
    assert row["baseline_steps_per_s"] == 1.0 and row["recovery_s"] == 0.0 and rec["p95_s"] == 0.0
    assert rec["steady_steps_per_s"] == 2.0 and rec["p95_run_median_s"] == float("inf")


def test_a_learner_that_stays_slow_after_a_fault_has_not_recovered():
    doc = run(flat(), minutes=30)
    doc["steps"] = stepping([(0, 1200, 2.0), (1200, 1800, 1.0)])
    doc["faults"] = [{"at": 1190.0, "end": 1200.0, "kind": "learner_kill", "target": "learner"}]
    rec = report.recoveries(doc, report.step_rate(doc), 300)
    assert rec["faults"][0]["baseline_steps_per_s"] == 2.0 and rec["p95_s"] == float("inf")
    assert not report.goals(doc)["summary"]["recovery_goal_met"]


def test_a_restarted_learners_settling_memory_is_not_the_goals_slope():
    """The learner is SIGKILLed every 30 minutes: its lives' RSS settles for their whole span, and the goal is for
    processes never restarted."""
    learner = [{**r, "node": "learner", "life": 2, "rss": 400 + 75 / 3600 * r["t"]} for r in flat()]
    summary = report.goals(run([*flat(), *learner]))["summary"]
    assert summary["worst_rss_slope_mb_h"] == 0.0 and summary["ci_pass"]


def test_a_directory_is_judged_against_its_configured_bound():
    """A learner's steps file and accepted-ids journal grow toward their caps for hours: within the bound the
    config sets, that is flat; a sampler's directory past its bound is not."""
    rows = [
        {
            "node": node,
            "life": 1,
            "t": float(t),
            "age": float(t),
            "rss": 400.0,
            "version": t // 10,
            "dir_bytes": int(mb(t)),
        }
        for t in range(0, 7201, 30)
        for node, mb in (("learner", lambda t: 40e6 + 10e6 * t / 3600), ("sampler1", lambda t: 5e6 + 5e9 * t / 3600))
    ]
    dirs = {d["node"]: d for d in report.dir_growth(run(rows, minutes=120), 900)}
    assert dirs["learner"]["flat"] and dirs["learner"]["second_half_max_mb"] < dirs["learner"]["bound_mb"]
    assert not dirs["sampler1"]["flat"] and dirs["sampler1"]["second_half_max_mb"] > dirs["sampler1"]["bound_mb"]


def test_the_intake_is_the_groups_received_a_second_across_learner_lives():
    doc = run(flat(), minutes=30)
    doc["steps"] = [{"time": float(t), "groups_received": (t % 600) * 4} for t in range(0, 1800)]  # restarts
    rates = dict(report.intake_rate(doc))
    assert rates[300.0] == 4.0 and rates[630.0] > 3.8  # the counter's restart at 600 s is not a drop
