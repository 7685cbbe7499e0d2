"""The soak's goals, computed from its samples (`goals`), and its figure and table (`write_report`).

Times: `samples[].t` and `events[].t` are seconds since the harness started; `faults[].at/end` are seconds since
the swarm was up (`t_ready`); the learner's `steps[].time` is wall-clock (the run started at `t0_wall`).
"""

from __future__ import annotations

import bisect
import json
import statistics
from collections import defaultdict
from pathlib import Path

RSS_GOAL_MB_H = 5.0
RSS_CI_BOUND_MB_H = 20.0  # "well above the goal": what fails the CI soak
RECOVERY_GOAL_S = 60.0
RESUME_GOAL_S = 120.0
BASELINE_S = 300.0  # a fault's steady rate: the learner's median 30-s rate over this long before the fault began
MIN_SPAN_S = 600.0  # a life needs this long after the warm-up for its slope to mean anything


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour; None for fewer than 3 points."""
    pts = [(t, v) for t, v in points if v is not None]
    if len(pts) < 3:
        return None
    mt = statistics.fmean(t for t, _ in pts)
    mv = statistics.fmean(v for _, v in pts)
    den = sum((t - mt) ** 2 for t, _ in pts)
    return 3600.0 * sum((t - mt) * (v - mv) for t, v in pts) / den if den else None


def _lives(samples: list[dict]) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for row in samples:
        out[(row["node"], row["life"])].append(row)
    return out


def memory_slopes(doc: dict, after: float) -> list[dict]:
    """RSS, open files and connections slopes of every life that ran at least `MIN_SPAN_S` past `after` s of age."""
    out = []
    for (node, life), rows in sorted(_lives(doc["samples"]).items()):
        late = [r for r in rows if r["age"] >= after]
        if len(late) < 3 or late[-1]["age"] - late[0]["age"] < min(MIN_SPAN_S, after):
            continue
        row = {"node": node, "life": life, "span_s": round(late[-1]["age"] - late[0]["age"])}
        for key in ("rss", "p2pd_rss", "fds", "p2pd_fds", "conns"):
            s = slope_per_hour([(r["age"], r.get(key)) for r in late])
            if s is not None:
                row[key + "_per_h"] = round(s, 2)
        row["rss_last"] = late[-1].get("rss")
        row["p2pd_rss_last"] = late[-1].get("p2pd_rss")
        out.append(row)
    return out


def never_restarted(doc: dict, slopes: list[dict]) -> list[dict]:
    """The slopes of the processes that lived the whole run (the goal's "every process that was not restarted"):
    a node's first life, with no second one."""
    restarted = {r["node"] for r in doc["samples"] if r["life"] > 1}
    return [s for s in slopes if s["node"] not in restarted]


def dir_bounds(doc: dict) -> dict[str, int]:
    """The largest data directory the run's config allows a learner and a sampler (`swarmnode hardware`'s disk
    need: versions kept, checkpoint, journals, steps file, accepted ids), in bytes."""
    from soak import SOAK_SETS  # the run's settings; swarmnode only where a run has directories to judge

    from swarmnode.config import load_config
    from swarmnode.node.disk_need import disk_need
    from swarmnode.node.hardware import estimate_memory

    cfg = load_config(doc["args"]["config"], [*SOAK_SETS, *doc["args"].get("sets", [])])
    disk = disk_need(cfg, estimate_memory(cfg))
    return {"learner": disk["learner_bytes"], "sampler": disk["sampler_bytes"], "bootstrap": 0}


def dir_growth(doc: dict, after: float) -> list[dict]:
    """Each node's data-directory bytes: largest in the first and the second half of the run past `after`; flat
    when the second half is not larger, or when the directory stays within what the config bounds it to (a steps
    file or an id journal grows to its cap over hours, then rotates or compacts)."""
    by_node: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for r in doc["samples"]:
        if "dir_bytes" in r and r["t"] - doc["t_ready"] >= after:
            by_node[r["node"]].append((r["t"], r["dir_bytes"]))
    bounds = dir_bounds(doc) if by_node else {}
    out = []
    for node, pts in sorted(by_node.items()):
        if len(pts) < 4:
            continue
        half = len(pts) // 2
        first, second = max(v for _, v in pts[:half]), max(v for _, v in pts[half:])
        bound = bounds.get(node.rstrip("0123456789"))
        out.append(
            {
                "node": node,
                "first_half_max_mb": round(first / 1e6, 2),
                "second_half_max_mb": round(second / 1e6, 2),
                "slope_mb_per_h": round(slope_per_hour([(t, v / 1e6) for t, v in pts]) or 0.0, 2),
                "bound_mb": None if bound is None else round(bound / 1e6, 1),
                "flat": second <= 1.1 * first + 2e6 or (bound is not None and second <= bound),
            }
        )
    return out


def acked_lost(doc: dict) -> list[dict]:
    """At each learner kill: the acknowledged groups its journal held, and how many the next life offered again."""
    out = []
    replays = {r["life"]: r for r in doc["replays"]}
    for kill in doc["journal_at_kill"]:
        offered = sum(replays.get(kill["life"] + 1, {}).get("offered", {}).values())
        out.append(
            {
                "t": round(kill["t"]),
                "journal": kill["journal"],
                "offered": offered,
                "lost": max(0, kill["journal"] - offered),
                "replayed": replays.get(kill["life"] + 1, {}).get("replayed"),
            }
        )
    return out


def versions_back(doc: dict) -> list[dict]:
    """Every time a node's version went down: within a life, and for the learner from one life to the next."""
    back = []
    for (node, life), rows in sorted(_lives(doc["samples"]).items()):
        held = [(r["t"], r["version"]) for r in rows if r.get("version") is not None and r["version"] >= 0]
        for (_t0, v0), (t1, v1) in zip(held, held[1:]):
            if v1 < v0:
                back.append({"node": node, "life": life, "t": t1, "from": v0, "to": v1})
    top = -1
    for (node, life), rows in sorted(_lives(doc["samples"]).items()):
        if node != "learner":
            continue
        versions = [r["version"] for r in rows if r.get("version") is not None]
        if versions and top >= 0 and versions[0] <= top:
            back.append(
                {"node": node, "life": life, "t": rows[0]["t"], "from": top, "to": versions[0], "across_restart": True}
            )
        if versions:
            top = max(top, max(versions))
    return back


def step_rate(doc: dict, window: float = 30.0) -> list[tuple[float, float]]:
    """(seconds since the swarm was up, learner steps/s over the `window` s ending then), every 10 s."""
    start = doc["t0_wall"] + doc["t_ready"]
    times = sorted(r["time"] - start for r in doc["steps"] if r.get("time"))
    if not times:
        return []
    out, j, k = [], 0, 0
    t = window
    while t <= times[-1] + window:
        while j < len(times) and times[j] < t - window:
            j += 1
        while k < len(times) and times[k] < t:
            k += 1
        out.append((t, (k - j) / window))
        t += 10.0
    return out


def intake_rate(doc: dict, window: float = 30.0) -> list[tuple[float, float]]:
    """(seconds since the swarm was up, groups the learner received a second over the `window` s ending then), every
    10 s: the learner's intake, which a fault cuts and which does not drift with the share of groups that carry a
    learning signal (the steps/s does, where the learner waits for data)."""
    start = doc["t0_wall"] + doc["t_ready"]
    rows = sorted((r["time"] - start, r.get("groups_received") or 0) for r in doc["steps"] if r.get("time"))
    times, cum, prev = [], [0.0], 0
    for t, received in rows:  # the counter starts again at each learner life
        cum.append(cum[-1] + (received - prev if received >= prev else received))
        times.append(t)
        prev = received
    out, t = [], window
    while times and t <= times[-1] + window:
        a, b = bisect.bisect_left(times, t - window), bisect.bisect_left(times, t)
        out.append((t, (cum[b] - cum[a]) / window))
        t += 10.0
    return out


def recoveries(doc: dict, rates: list[tuple[float, float]], after: float) -> dict:
    """Per fault: seconds from its end until the learner's steps/s is back to 90 % of its steady rate then, the
    median 30-s rate over the `BASELINE_S` before the fault began. The rate drifts over a run (as the task gets
    solved, more groups carry no learning signal and are dropped, so the same groups make fewer steps; a busy
    machine slows it too): one rate for the whole run would count that drift as faults never recovered from.
    `p95_run_median_s` is the p95 against the run's one median rate past `after` (`steady_steps_per_s`)."""
    steady_pts = [r for t, r in rates if t >= after]
    steady = statistics.median(steady_pts) if steady_pts else 0.0

    def back_after(end: float, rate: float) -> float | None:
        back = next((t - 30.0 for t, r in rates if t - 30.0 >= end and r >= 0.9 * rate), None)
        return None if back is None else round(max(0.0, back - end), 1)

    def p95(values: list[float | None]) -> float | None:
        ordered = sorted(v if v is not None else float("inf") for v in values)
        return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else None

    rows = []
    for f in doc["faults"]:
        before = [r for t, r in rates if f["at"] - BASELINE_S <= t <= f["at"]]
        baseline = statistics.median(before) if len(before) >= 5 else steady
        rows.append(
            {
                "at": round(f["at"]),
                "kind": f["kind"],
                "target": f["target"],
                "baseline_steps_per_s": round(baseline, 3),
                "recovery_s": back_after(f["end"], baseline),
                "recovery_run_median_s": back_after(f["end"], steady),
            }
        )
    return {
        "steady_steps_per_s": round(steady, 3),
        "faults": rows,
        "p95_s": p95([r["recovery_s"] for r in rows]),
        "p95_run_median_s": p95([r["recovery_run_median_s"] for r in rows]),
    }


SAMPLER_OWN_FAULTS = ("freeze", "net_cut", "disk_full")  # a sampler cannot send while under one of these


def sampler_resume(doc: dict) -> list[dict]:
    """After each fault's end: for every sampler alive then, seconds until it sent a group again (None: not within
    the samples). A sampler under a fault of its own (frozen, cut off, disk full) that overlaps the wait is judged
    from that fault's end, in that fault's row, not in this one."""
    t_ready = doc["t_ready"]
    by_node: dict[str, list[dict]] = defaultdict(list)
    for r in doc["samples"]:
        if r["node"].startswith("sampler"):
            by_node[r["node"]].append(r)
    own: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for g in doc["faults"]:
        if g["kind"] in SAMPLER_OWN_FAULTS:
            own[g["target"]].append((t_ready + g["at"], t_ready + g["end"]))
    out = []
    for f in doc["faults"]:
        end = t_ready + f["end"]
        for node, rows in by_node.items():
            at_end = [r for r in rows if end - 15 <= r["t"] <= end + 15]
            if not at_end:
                continue
            life = at_end[-1]["life"]
            mine = [r for r in rows if r["life"] == life and r.get("sent") is not None]
            before = [r for r in mine if r["t"] <= end]
            base = before[-1]["sent"] if before else 0.0
            later = [r for r in mine if r["t"] > end and r["sent"] > base]
            gap = (later[0]["t"] - end) if later else None
            last = mine[-1]["t"] if mine else end
            if gap is None and last - end < RESUME_GOAL_S:
                continue  # the life ended (a later fault) before it could show
            resumed = end + gap if gap is not None else last
            if any(a < resumed and b > end for a, b in own[node]):
                continue  # it was frozen, cut off or full meanwhile: that fault's own row judges it
            out.append(
                {
                    "fault_at": round(f["at"]),
                    "fault": f["kind"],
                    "sampler": node,
                    "resume_s": None if gap is None else round(gap, 1),
                }
            )
    return out


def acked_vs_trained(doc: dict, prompts_per_step: int = 8) -> dict:
    acked = 0.0
    for (node, _life), rows in _lives(doc["samples"]).items():
        values = [r["acked"] for r in rows if r.get("acked") is not None]
        if node.startswith("sampler") and values:
            acked += max(values)
    return {"acked": int(acked), "trained": len(doc["steps"]) * prompts_per_step, "steps": len(doc["steps"])}


def reward_trend(doc: dict) -> dict:
    rewards = [r["reward_mean"] for r in doc["steps"] if r.get("reward_mean") is not None]
    tenth = max(1, len(rewards) // 10)
    held = doc["heldout"]
    return {
        "train_first_tenth": round(statistics.fmean(rewards[:tenth]), 4) if rewards else None,
        "train_last_tenth": round(statistics.fmean(rewards[-tenth:]), 4) if rewards else None,
        "heldout_first": held[0]["eval_reward"] if held else None,
        "heldout_last": held[-1]["eval_reward"] if held else None,
        "heldout_slope_per_h": round(slope_per_hour([(h["t"], h["eval_reward"]) for h in held]) or 0.0, 4),
    }


def goals(doc: dict) -> dict:
    duration = doc["args"]["minutes"] * 60
    after = 900.0 if duration >= 3600 else duration / 3
    slopes = memory_slopes(doc, after)
    rates = step_rate(doc)
    rec = recoveries(doc, rates, after)
    intake = recoveries(doc, intake_rate(doc), after)
    lost = acked_lost(doc)
    back = versions_back(doc)
    resume = sampler_resume(doc)
    dirs = dir_growth(doc, after)
    reward = reward_trend(doc)
    lasting = never_restarted(doc, slopes)
    worst_rss = max((max(s.get("rss_per_h", 0), s.get("p2pd_rss_per_h", 0)) for s in lasting), default=None)
    late_resume = [r for r in resume if r["resume_s"] is None or r["resume_s"] > RESUME_GOAL_S]
    died = [e for e in doc["events"] if e["kind"] == "died"]
    orphans = [e for e in doc["events"] if e["kind"] == "orphan_p2pd"]
    summary = {
        "slope_after_s": after,
        "worst_rss_slope_mb_h": worst_rss,
        "rss_goal_met": worst_rss is not None and worst_rss <= RSS_GOAL_MB_H,
        "dirs_flat": all(d["flat"] for d in dirs),
        "acked_lost": sum(x["lost"] for x in lost),
        "versions_back": len(back),
        "recovery_p95_s": rec["p95_s"],
        "recovery_goal_met": rec["p95_s"] is not None and rec["p95_s"] <= RECOVERY_GOAL_S,
        "recovery_p95_run_median_s": rec["p95_run_median_s"],
        "intake_recovery_p95_s": intake["p95_s"],
        "sampler_resumes": len(resume),
        "late_resumes": len(late_resume),
        "reward_rises": (reward["heldout_last"] or 0) > (reward["heldout_first"] or 0) if doc["heldout"] else None,
        "unexpected_exits": len(died),
        "orphan_p2pds": len(orphans),
        **acked_vs_trained(doc),
    }
    summary["ci_pass"] = (
        summary["acked_lost"] == 0
        and summary["versions_back"] == 0
        and worst_rss is not None
        and worst_rss <= RSS_CI_BOUND_MB_H
    )
    return {
        "summary": summary,
        "memory": slopes,
        "dirs": dirs,
        "acked_lost": lost,
        "versions_back": back,
        "recovery": rec,
        "intake_recovery": intake,
        "resume": resume,
        "reward": reward,
        "died": died,
        "orphans": orphans,
    }


def figure(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t_ready = doc["t_ready"]
    lives = _lives(doc["samples"])
    fig, axes = plt.subplots(4, 2, figsize=(14, 14), sharex=True)
    ax = axes.flat
    colours: dict[str, str] = {}

    def line(a, node, xs, ys, **kw):
        colour = colours.setdefault(node, f"C{len(colours) % 10}")
        a.plot(xs, ys, color=colour, lw=0.8, **kw)

    for (node, life), rows in sorted(lives.items()):
        xs = [(r["t"] - t_ready) / 60 for r in rows]
        lab = dict(label=node) if life == 1 else {}
        line(ax[0], node, xs, [r.get("rss") for r in rows], **lab)
        line(ax[1], node, xs, [r.get("p2pd_rss") for r in rows])
        line(ax[2], node, xs, [r.get("fds") for r in rows])
        line(ax[3], node, xs, [r.get("conns") for r in rows])
        dx = [(r["t"] - t_ready) / 60 for r in rows if "dir_bytes" in r]
        line(ax[4], node, dx, [r["dir_bytes"] / 1e6 for r in rows if "dir_bytes" in r])
        line(ax[5], node, xs, [r.get("version") for r in rows])
    rates = step_rate(doc)
    ax[6].plot([t / 60 for t, _ in rates], [r for _, r in rates], lw=0.8, color="k", label="learner steps/s")
    tw = doc["t0_wall"] + t_ready
    rew = ax[7]
    steps = [r for r in doc["steps"] if r.get("reward_mean") is not None]
    k = 50
    if len(steps) > k:
        xs = [(steps[i]["time"] - tw) / 60 for i in range(k, len(steps))]
        ys = [statistics.fmean(s["reward_mean"] for s in steps[i - k : i]) for i in range(k, len(steps))]
        rew.plot(xs, ys, lw=0.8, color="C0", label=f"training reward (mean of {k} steps)")
    if doc["heldout"]:
        rew.plot(
            [(h["t"] - t_ready) / 60 for h in doc["heldout"]],
            [h["eval_reward"] for h in doc["heldout"]],
            "o-",
            color="C3",
            label="held-out reward (mean@16)",
        )
    titles = [
        "node RSS (MB)",
        "p2pd RSS (MB)",
        "node open files",
        "p2pd TCP connections",
        "data dir (MB)",
        "policy version held",
        "learner steps/s (30 s window)",
        "reward",
    ]
    for a, title in zip(ax, titles):
        a.set_title(title, fontsize=10)
        for f in doc["faults"]:
            a.axvline(f["at"] / 60, color="r" if f["kind"] != "sampler_kill" else "0.8", lw=0.5, zorder=0)
    ax[0].legend(fontsize=7, ncol=3)
    ax[6].legend(fontsize=7)
    rew.legend(fontsize=7)
    for a in axes[-1]:
        a.set_xlabel("minutes (grey: sampler kills; red: learner, bootstrap, freeze, cut, disk)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def table(doc: dict) -> str:
    g = doc["goals"]
    s = g["summary"]
    rows = [
        (
            "RSS slope after the warm-up, every process never restarted (<= 5 MB/h)",
            f"worst {s['worst_rss_slope_mb_h']} MB/h",
            s["rss_goal_met"],
        ),
        (
            "data directories flat or within their configured bound",
            ", ".join(
                f"{d['node']} {d['first_half_max_mb']}->{d['second_half_max_mb']} MB"
                + (f" (bound {d['bound_mb']})" if d.get("bound_mb") else "")
                for d in g["dirs"]
            ),
            s["dirs_flat"],
        ),
        (
            "acknowledged groups lost (0)",
            f"{s['acked_lost']} ({len(g['acked_lost'])} learner kills)",
            s["acked_lost"] == 0,
        ),
        ("versions going back (0)", str(s["versions_back"]), s["versions_back"] == 0),
        (
            "learner back to 90 % of its steps/s before the fault, p95 over faults (<= 60 s)",
            f"{s['recovery_p95_s']} s (against the run's median rate: {s['recovery_p95_run_median_s']} s; the "
            f"learner's intake of groups: {s['intake_recovery_p95_s']} s)",
            s["recovery_goal_met"],
        ),
        (
            "samplers make groups again within 2 min",
            f"{s['late_resumes']} late of {s['sampler_resumes']}",
            s["late_resumes"] == 0,
        ),
        (
            "held-out reward rises",
            f"{g['reward']['heldout_first']} -> {g['reward']['heldout_last']}",
            s["reward_rises"],
        ),
        (
            "unexpected exits / orphan p2pd",
            f"{s['unexpected_exits']} / {s['orphan_p2pds']}",
            s["unexpected_exits"] == 0 and s["orphan_p2pds"] == 0,
        ),
    ]
    lines = ["| goal | measured | met |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {'yes' if c else 'no'} |" for a, b, c in rows]
    lines.append("")
    lines.append(
        f"groups acknowledged {s['acked']}, trained {s['trained']} ({s['steps']} steps); "
        f"steady {g['recovery']['steady_steps_per_s']} steps/s"
    )
    return "\n".join(lines) + "\n"


def write_report(out: Path, doc: dict) -> None:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=None, default=str))
    out.with_suffix(".md").write_text(table(doc))
    try:
        figure(doc, out.with_suffix(".png"))
    except Exception as exc:  # the numbers matter more than the picture
        print(f"soak: no figure ({type(exc).__name__}: {exc})")


if __name__ == "__main__":
    import sys

    path = Path(sys.argv[1])
    doc = json.loads(path.read_text())
    doc["goals"] = goals(doc)
    write_report(path.with_suffix(""), doc)
    print(table(doc))
