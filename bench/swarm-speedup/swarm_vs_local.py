"""Reward vs wall-clock time: the local swarm (`swarmnode demo`: bootstrap + learner + 2 samplers as processes)
against the single-process `swarmnode train-local` loop, on the same cores, config and time budget.

Both runs are started as subprocesses one after the other (never together), each given the same budget from
its launch (model loading and, for the swarm, joining included). Per time bucket the mean per-step training
reward of each, and their ratio; at the end the reward gain of each (mean of the last 10% of its steps minus
the first 10%) and the swarm's gain as a fraction of the local loop's.

    python bench/swarm-speedup/swarm_vs_local.py [--minutes 4] [--bucket 30] [--set k=v ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_swarm(minutes: float, sets: list[str], workdir: Path) -> tuple[float, list[dict]]:
    cmd = [
        sys.executable,
        "-m",
        "swarmnode",
        "demo",
        "--json",
        "--steps",
        "1000000",
        "--minutes",
        str(minutes),
        "--workdir",
        str(workdir),
        *[a for s in sets for a in ("--set", s)],
    ]
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=minutes * 60 + 300)
    if done.returncode != 0:
        raise SystemExit(f"demo failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (workdir / "learner" / "learner_steps.jsonl").read_text().splitlines()]
    return t0, [{"time": r["time"], "reward_mean": r["reward_mean"]} for r in rows]


def run_local(minutes: float, sets: list[str]) -> tuple[float, list[dict]]:
    cmd = [
        sys.executable,
        "-m",
        "swarmnode",
        "train-local",
        "-c",
        "tiny-cpu",
        "--json",
        "--steps",
        "1000000",
        "--max-seconds",
        str(minutes * 60),
        *[a for s in sets for a in ("--set", s)],
    ]
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=minutes * 60 + 300)
    if done.returncode != 0:
        raise SystemExit(f"train-local failed:\n{done.stderr[-3000:]}")
    return t0, json.loads(done.stdout)["curve"]


def buckets(t0: float, rows: list[dict], width: float, horizon: float) -> list[float | None]:
    """Mean reward of the steps in each [k*width, (k+1)*width) second window since launch."""
    out = []
    for k in range(int(horizon // width)):
        inside = [r["reward_mean"] for r in rows if k * width <= r["time"] - t0 < (k + 1) * width]
        out.append(round(statistics.fmean(inside), 4) if inside else None)
    return out


def gain(rows: list[dict]) -> float:
    rewards = [r["reward_mean"] for r in rows]
    tenth = max(1, len(rewards) // 10)
    return statistics.fmean(rewards[-tenth:]) - statistics.fmean(rewards[:tenth])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=4.0)
    ap.add_argument("--bucket", type=float, default=30.0, help="seconds per curve point")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="swarm-vs-local-") as tmp:
        swarm_t0, swarm = run_swarm(args.minutes, args.sets, Path(tmp) / "demo")
    local_t0, local = run_local(args.minutes, args.sets)
    horizon = args.minutes * 60
    sb, lb = buckets(swarm_t0, swarm, args.bucket, horizon), buckets(local_t0, local, args.bucket, horizon)
    doc = {
        "minutes": args.minutes,
        "bucket_s": args.bucket,
        "swarm": {"steps": len(swarm), "curve": sb, "gain": round(gain(swarm), 4)},
        "local": {"steps": len(local), "curve": lb, "gain": round(gain(local), 4)},
        "ratio_curve": [round(s / lo, 3) if s is not None and lo else None for s, lo in zip(sb, lb)],
    }
    doc["gain_ratio"] = round(doc["swarm"]["gain"] / doc["local"]["gain"], 3) if doc["local"]["gain"] else None
    doc["steps_ratio"] = round(len(swarm) / len(local), 3) if local else None
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"{'t (s)':>6} {'swarm':>7} {'local':>7} {'ratio':>6}")
    for k, (s, lo, r) in enumerate(zip(sb, lb, doc["ratio_curve"])):
        print(
            f"{(k + 1) * args.bucket:6.0f} {s if s is not None else '-':>7} {lo if lo is not None else '-':>7} "
            f"{r if r is not None else '-':>6}"
        )
    print(
        f"steps: swarm {len(swarm)}, local {len(local)} (ratio {doc['steps_ratio']}); reward gain: swarm "
        f"{doc['swarm']['gain']:+.3f}, local {doc['local']['gain']:+.3f} (ratio {doc['gain_ratio']})"
    )


if __name__ == "__main__":
    main()
