"""Do samplers outrun the learner? Waste (groups that reached the learner and were never drawn) with credit
pacing (`sync.pacing=credits`) against without (`outbox`: samplers pause only while 64 groups wait unacked),
in one run, arm after arm, same config.

Each arm is a local swarm of real processes on 127.0.0.1 (bootstrap, one learner, `--samplers` samplers, as
`swarmnode demo` starts them) run until the learner took `--steps` steps. From the learner's step records:
- waste at steady state: groups lost (refused as stale, aged out, quota, lineage, evicted) over groups arrived,
  between step `--warmup` and the last (`swarmnode.learner.waste.waste_between`), and over the whole run;
- completion lengths (mean tokens) of the groups drawn and of those dropped as stale (`fates`);
- learner steps/s and mean staleness over the window, and `offered`: groups arrived per group drawn (above 1:
  the samplers make more than the learner takes).
Load (/proc/loadavg) before and after each arm is recorded.

    python bench/sampler-pacing/pacing.py [--config tiny-cpu] [--samplers 2] [--steps 300] [--warmup 100]
        [--arms outbox,credits] [--set key=value ...] [--out bench/sampler-pacing/results.json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.learner.waste import waste_between
from swarmnode.local.demo import read_steps
from swarmnode.local.swarm import DemoRun, prepare_swarm, start_swarm


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def sampler_progress(root: Path, samplers: int) -> dict[str, dict[str, int]]:
    """Each sampler's last progress line: groups made and acked, the share of its time spent waiting for
    credit (at 0.5 it could have made twice what the learner took)."""
    out = {}
    for i in range(1, samplers + 1):
        lines = re.findall(
            r"(\d+) groups made, (\d+) acked, .*?([\d.]+) s of ([\d.]+) s waiting for credit",
            (root / f"sampler{i}.log").read_text(errors="replace"),
        )
        made, acked, waited, running = lines[-1] if lines else (0, 0, 0.0, 1.0)
        out[f"sampler{i}"] = {
            "made": int(made),
            "acked": int(acked),
            "waiting_share": round(float(waited) / max(1e-9, float(running)), 3),
        }
    return out


def run_arm(
    root: Path, config: str, samplers: int, steps: int, sets: list[str], minutes: float
) -> tuple[list[dict], dict]:
    """Start the swarm in `root`, wait until its learner took `steps` steps (or `minutes` passed), stop it;
    the learner's step records and the samplers' last progress."""
    sets = prepare_swarm(root, config, sets, say=lambda _msg: None)
    run = DemoRun(root)
    deadline = time.monotonic() + minutes * 60
    try:
        start_swarm(run, config, sets, say=lambda _msg: None, samplers=samplers)
        while time.monotonic() < deadline:
            run.check_alive()
            rows = read_steps(root / "learner" / STEPS_FILE)
            if rows and rows[-1]["step"] >= steps:
                break
            time.sleep(1.0)
    finally:
        run.stop()
    return read_steps(root / "learner" / STEPS_FILE), sampler_progress(root, samplers)


def fate_means(row: dict) -> dict:
    """Mean completion tokens of the groups drawn and of those dropped (stale on arrival or aged out)."""
    fates = row["fates"]
    dropped = fates["stale"]["groups"] + fates["aged_out"]["groups"]
    tokens = sum((fates[f]["mean_tokens"] or 0.0) * fates[f]["groups"] for f in ("stale", "aged_out"))
    return {
        "drawn_groups": fates["drawn"]["groups"],
        "drawn_tokens": fates["drawn"]["mean_tokens"],
        "dropped_groups": dropped,
        "dropped_tokens": round(tokens / dropped, 3) if dropped else None,
    }


def summarize(rows: list[dict], warmup: int) -> dict:
    first = next(r for r in rows if r["step"] >= warmup)
    last = rows[-1]
    window = [r for r in rows if r["step"] > first["step"]]
    steady = waste_between(first, last)
    targets = [r["credit_target"] for r in window if r.get("credit_target") is not None]
    drawn = last["fates"]["drawn"]["groups"] - first["fates"]["drawn"]["groups"]
    seconds = float(last["time"]) - float(first["time"])
    return {
        "steps": last["step"],
        "steady": {
            **steady,
            "waste": round(steady["waste"], 4),
            "from_step": first["step"],
            "offered": round(steady["arrived"] / drawn, 3) if drawn else None,
            "steps_per_s": round((last["step"] - first["step"]) / seconds, 2) if seconds > 0 else None,
            "staleness_mean": round(sum(r.get("staleness_mean", 0.0) for r in window) / len(window), 2),
            "credit_target_median": statistics.median(targets) if targets else None,
            "learner_idle_share": round((last["idle_seconds"] - first["idle_seconds"]) / seconds, 3)
            if seconds > 0
            else None,
        },
        "whole_run": {k: round(v, 4) for k, v in waste_between({"buffer_counters": {}}, last).items()},
        "lengths": fate_means(last),
        "buffer_counters": last["buffer_counters"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="tiny-cpu")
    parser.add_argument("--samplers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100, help="steady state is measured from this step on")
    parser.add_argument("--arms", default="outbox,credits", help="sync.pacing values, run in this order")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="config override for every arm")
    parser.add_argument("--minutes", type=float, default=15.0, help="an arm stops after this long regardless")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--workdir", type=Path, default=None, help="keep each arm's nodes' files in <workdir>/<arm>")
    args = parser.parse_args()
    results = {
        "config": args.config,
        "samplers": args.samplers,
        "sets": args.sets,
        "arms": {},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    for arm in args.arms.split(","):
        before = load()
        with tempfile.TemporaryDirectory(prefix=f"pacing-{arm}-") as tmp:
            root = args.workdir / arm if args.workdir else Path(tmp)
            root.mkdir(parents=True, exist_ok=True)
            rows, samplers = run_arm(
                root, args.config, args.samplers, args.steps, [*args.sets, f"sync.pacing={arm}"], args.minutes
            )
        results["arms"][arm] = {
            **summarize(rows, args.warmup),
            "samplers": samplers,
            "load_before": before,
            "load_after": load(),
        }
        print(arm, json.dumps(results["arms"][arm]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
