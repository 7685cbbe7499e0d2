"""Two averaging learners against one: reward per wall-clock second and per sample, and what averaging costs.

Two arms, one after the other, in one run, on the same config and budget: a local swarm (bootstrap, N learners,
2 samplers, real processes on 127.0.0.1) with N = 1 (a plain learner) and N = 2 (`learner.max_learners=2`:
the learners average their parameters through hivemind every `--average-every` steps). Each arm trains for
`--minutes` from the moment its learners are ready. Reported per arm:
- the training reward (mean reward of the groups each step drew) per time bucket, all learners together;
- groups trained (samples), steps, versions;
- held-out reward (`swarmnode.local.evaluation`, mean@32 on the task's 12 eval prompts) of the arm's newest published
  version, and of version 0 (the start), so "reward per sample" = held-out gain / groups trained;
- for N = 2: averaging rounds and failures, seconds per round (each round as its learner logged it) and MB per
  round (sent plus received by one learner, from the tensor sizes).
With `--repeats R` the two arms alternate R times (one, two, one, two, ...); every repeat's ratios (two / one,
against the one-learner arm of the same repeat) and their medians over the repeats are reported. Load (`uptime`)
before and after each arm is recorded: on a shared machine it decides the figures.

    python bench/two-learners/two_learners.py [--minutes 2] [--average-every 8] [--repeats 1] [--out bench/two-learners/results/two_learners.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from swarmnode.config import load_config
from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.local.demo import read_steps
from swarmnode.local.evaluation import evaluate
from swarmnode.local.swarm import DemoRun, learner_names, prepare_swarm, start_swarm, wait_for_line
from swarmnode.model.models import load_model, load_tokenizer, resolve_model_path
from swarmnode.swarm.weights import WeightStore
from swarmnode.tasks import build_task

CONFIG = "tiny-cpu"
EVAL_SAMPLES = 32  # completions per held-out prompt (the tiny task has 12: 384 in all)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_arm(root: Path, learners: int, minutes: float, sets: list[str]) -> dict:
    """One local swarm with `learners` learners and 2 samplers (`swarmnode.local.demo`'s, as `swarmnode demo
    --learners N` starts it); the learners' step records and stores."""
    names = learner_names(learners)
    arm_sets = prepare_swarm(root, CONFIG, sets, say=lambda _msg: None, learners=learners)
    run = DemoRun(root)
    before = load()
    try:
        start_swarm(run, CONFIG, arm_sets, say=lambda _msg: None, learners=learners)
        for proc in [p for p in run.procs if p.name in names]:
            wait_for_line(proc, "learner ready:", 300)
        start = time.time()
        while time.time() < start + minutes * 60:
            run.check_alive()
            time.sleep(1.0)
    finally:
        run.stop()
    rows = {n: [r for r in read_steps(root / n / STEPS_FILE) if r["time"] >= start] for n in names}
    return {
        "start": start,
        "rows": rows,
        "stores": [root / n / "weights" for n in names],
        "load_before": before,
        "load_after": load(),
    }


def heldout(cfg, stores: list[Path] | None) -> dict:
    """Held-out reward of the newest version the learners hold as published; with no stores, of version 0, the
    model every learner starts from (built once and cached; a run publishes too many versions to keep it)."""
    model, version = load_model(cfg.model, cfg.task, "cpu"), 0
    if stores:
        held = [(v, s) for s in stores for v in WeightStore(s, cfg.run_id).versions()]
        version, store = max(held, key=lambda vs: vs[0])
        model.load_state_dict(WeightStore(store, cfg.run_id).state_dict(version))
    sc = cfg.sampler
    out = evaluate(
        model,
        load_tokenizer(cfg.model, cfg.task),
        build_task(cfg.task),
        samples=EVAL_SAMPLES,
        temperature=sc.temperature,
        max_new_tokens=sc.max_completion_length,
        max_prompt_tokens=sc.max_prompt_length,
        seed=cfg.task.seed,
    )
    return {"version": version, "reward": round(out["eval_reward"], 4), "exact": round(out["eval_exact"], 4)}


def curve(start: float, rows: dict[str, list[dict]], bucket: float, minutes: float) -> list[float | None]:
    """Mean training reward of every learner's steps in each `bucket`-second window."""
    every = [r for rs in rows.values() for r in rs]
    out = []
    for k in range(int(minutes * 60 // bucket)):
        inside = [r["reward_mean"] for r in every if k * bucket <= r["time"] - start < (k + 1) * bucket]
        out.append(round(statistics.fmean(inside), 4) if inside else None)
    return out


def averaging_costs(rows: dict[str, list[dict]]) -> dict:
    """Rounds, failures, seconds and MB per round, from the learners' step records (a record after each new
    round carries that round's figures)."""
    seconds, mb, rounds, failures = [], [], 0, 0
    for rs in rows.values():
        seen = 0
        for r in rs:
            n = r.get("averaging_rounds") or 0
            if n > seen and r.get("averaging_seconds") is not None:
                seconds.append(r["averaging_seconds"])
                mb.append(r.get("averaging_mb") or 0.0)
            seen = max(seen, n)
        if rs:
            rounds = max(rounds, rs[-1].get("averaging_rounds") or 0)
            failures += rs[-1].get("averaging_failures") or 0
    return {
        "rounds": rounds,
        "failures_all_learners": failures,
        "seconds_per_round_median": round(statistics.median(seconds), 3) if seconds else None,
        "seconds_per_round_mean": round(statistics.fmean(seconds), 3) if seconds else None,
        "mb_per_round": round(statistics.fmean(mb), 3) if mb else None,
    }


def summarize(cfg, arm: dict, start_eval: dict, bucket: float, minutes: float) -> dict:
    rows = arm["rows"]
    groups = sum(r.get("groups_trained", 0) for rs in rows.values() for r in rs)
    end_eval = heldout(cfg, arm["stores"])
    gain = end_eval["reward"] - start_eval["reward"]
    out = {
        "steps": {n: len(rs) for n, rs in rows.items()},
        "groups_trained": int(groups),
        "heldout_start": start_eval,
        "heldout_end": end_eval,
        "heldout_gain": round(gain, 4),
        "gain_per_1000_groups": round(1000 * gain / groups, 5) if groups else None,
        "gain_per_minute": round(gain / minutes, 5),
        "train_reward_curve": (points := curve(arm["start"], rows, bucket, minutes)),
        "train_reward_last_third": round(
            statistics.fmean([p for p in points[-len(points) // 3 :] if p is not None] or [0.0]), 4
        ),
        "load_before": arm["load_before"],
        "load_after": arm["load_after"],
    }
    if len(rows) > 1:
        out["averaging"] = averaging_costs(rows)
    return out


def ratios(one: dict, two: dict) -> dict:
    """Two learners' figures over one learner's (None where one learner's is zero)."""

    def over(key: str) -> float | None:
        return round(two[key] / one[key], 3) if one[key] else None

    return {key: over(key) for key in ("heldout_gain", "groups_trained", "gain_per_1000_groups")}


def median_of(values: list[float | None]) -> float | None:
    """Median of the values that exist (None if none does)."""
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=2.0, help="training time per arm, from the learners' ready")
    ap.add_argument("--average-every", type=int, default=8)
    ap.add_argument("--bucket", type=float, default=20.0, help="seconds per curve point")
    ap.add_argument("--repeats", type=int, default=1, help="alternate the two arms this many times")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--out", default="bench/two-learners/results/two_learners.json")
    args = ap.parse_args()
    if args.repeats < 1 or args.minutes <= 0:
        ap.error("--repeats must be at least 1 and --minutes above 0")
    sets = [*args.sets, f"learner.average_every={args.average_every}"]
    cfg = load_config(CONFIG, sets)
    resolve_model_path(cfg.model, cfg.task)  # built once, cached, before either arm's clock starts
    torch.set_num_threads(1)
    doc = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "config": CONFIG,
        "minutes_per_arm": args.minutes,
        "average_every": args.average_every,
        "cpus": os.cpu_count(),
        "repeats": [],
    }
    start_eval = heldout(cfg, None)
    with tempfile.TemporaryDirectory(prefix="two-learners-") as tmp:
        for rep in range(args.repeats):
            arms = {}
            for learners, name in ((1, "one"), (2, "two")):
                print(f"repeat {rep + 1}/{args.repeats}: {name} learner(s), {args.minutes:g} min", file=sys.stderr)
                root = Path(tmp) / f"{name}{rep}"
                root.mkdir()
                arms[name] = summarize(
                    cfg, run_arm(root, learners, args.minutes, sets), start_eval, args.bucket, args.minutes
                )
            arms["ratios_two_over_one"] = ratios(arms["one"], arms["two"])
            doc["repeats"].append(arms)
    doc["median_ratios_two_over_one"] = {
        key: median_of([r["ratios_two_over_one"][key] for r in doc["repeats"]])
        for key in ("heldout_gain", "groups_trained", "gain_per_1000_groups")
    }
    doc["median_gain"] = {name: median_of([r[name]["heldout_gain"] for r in doc["repeats"]]) for name in ("one", "two")}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "repeats"}, indent=1))
    for rep, arms in enumerate(doc["repeats"]):
        for name in ("one", "two"):
            print(rep + 1, name, json.dumps({k: v for k, v in arms[name].items() if k != "train_reward_curve"}))
        print(rep + 1, "two / one", json.dumps(arms["ratios_two_over_one"]))


if __name__ == "__main__":
    main()
