"""One real swarm run with delayed weight delivery, compared with the single-process latency sweep's cell.

Runs `swarmnode demo` (bootstrap + learner + 2 samplers as processes) with `--simulate-delay` on weight
delivery, chosen so that in learner steps it matches the sweep's delay distribution for `--max-delay`
(log-normal, median max/sqrt(32), sigma ln(32)/4, capped at max): the step rate of the swarm is measured by a
short calibration run first (or given with --steps-per-second). Afterwards the learner's last checkpoint is
evaluated on the held-out prompts exactly as the sweep evaluates (mean@16), and the figures are printed next to
the sweep's row for the same loss and delay (bench/latency-tolerance/results/latency_sweep/rows.json).

    python bench/latency-tolerance/swarm_latency_run.py [--loss gepo] [--max-delay 64] [--steps 400] [--steps-per-second R]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT  # noqa: E402  (also puts this checkout's package first on sys.path)

SPREAD = 32.0


def demo(steps: int, sets: list[str], workdir: Path, minutes: float) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "swarmnode",
        "demo",
        "--json",
        "--steps",
        str(steps),
        "--minutes",
        str(minutes),
        "--workdir",
        str(workdir),
        *[a for s in sets for a in ("--set", s)],
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=minutes * 60 + 300)
    if done.returncode != 0:
        raise SystemExit(f"demo failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def steps_per_second(workdir: Path) -> float:
    rows = [json.loads(line) for line in (workdir / "learner" / "learner_steps.jsonl").read_text().splitlines()]
    half = rows[len(rows) // 2 :]  # skip the start-up
    return (len(half) - 1) / max(1e-6, half[-1]["time"] - half[0]["time"])


def evaluate_checkpoint(workdir: Path, sets: list[str]) -> dict:
    import torch

    from swarmnode.config import load_config
    from swarmnode.learner.checkpoint import load_checkpoint
    from swarmnode.local.evaluation import evaluate
    from swarmnode.model.models import load_model, load_tokenizer
    from swarmnode.tasks import build_task

    cfg = load_config("tiny-cpu", sets)
    state = load_checkpoint(workdir / "learner" / "checkpoints")
    model = load_model(cfg.model, cfg.task, "cpu")
    model.load_state_dict(state["model"])
    torch.set_num_threads(1)
    sc = cfg.sampler
    return evaluate(
        model,
        load_tokenizer(cfg.model, cfg.task),
        build_task(cfg.task),
        samples=16,
        temperature=sc.temperature,
        max_new_tokens=sc.max_completion_length,
        max_prompt_tokens=sc.max_prompt_length,
        seed=cfg.task.seed,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loss", default="gepo")
    ap.add_argument("--max-delay", type=int, default=64, help="in learner steps, as in the sweep")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--steps-per-second", type=float, default=None, help="skip the calibration run")
    ap.add_argument("--rows", default=str(ROOT / "bench/latency-tolerance/results/latency_sweep/rows.json"))
    args = ap.parse_args()
    from swarmnode.config import LEVEL_OF_ALGORITHM

    base = [f"learner.importance_sampling_level={LEVEL_OF_ALGORITHM[args.loss]}"]
    with tempfile.TemporaryDirectory(prefix="swarm-latency-") as tmp:
        rate = args.steps_per_second
        if rate is None:
            demo(60, base, Path(tmp) / "calibrate", 5)
            rate = steps_per_second(Path(tmp) / "calibrate")
        d = args.max_delay
        mu, sigma, cap = math.log(d / math.sqrt(SPREAD) / rate), math.log(SPREAD) / 4, d / rate
        spec = f"lognormal:{mu:.3f},{sigma:.3f},{cap:.1f}"
        sets = [*base, f"sync.simulate_delay={spec}", "sync.delay_target=weights", f"sync.max_staleness={d + 8}"]
        print(f"swarm step rate {rate:.2f} steps/s -> --simulate-delay {spec} (seconds) on weights", flush=True)
        began = time.monotonic()
        doc = demo(args.steps, sets, Path(tmp) / "run", args.steps / rate / 60 * 2 + 3)
        ev = evaluate_checkpoint(Path(tmp) / "run", sets)
        rows = [json.loads(line) for line in (Path(tmp) / "run/learner/learner_steps.jsonl").read_text().splitlines()]
    stale = [r.get("staleness_mean", 0.0) for r in rows]
    swarm = {
        "steps": doc["learner_steps"],
        "wall_s": round(time.monotonic() - began),
        "train_end": doc["reward_end"],
        "train_start": doc["reward_start"],
        "staleness_mean": round(statistics.fmean(stale), 1),
        "staleness_max": doc["staleness_max"],
        "eval_last": round(ev["eval_reward"], 3),
        "is_weight_var": round(statistics.fmean(r.get("is_weight_var", 0.0) for r in rows), 4),
        "grad_norm_max": round(max(r.get("grad_norm", 0.0) for r in rows), 2),
    }
    sweep = (
        next(
            (r for r in json.loads(Path(args.rows).read_text()) if r["variant"] == args.loss and r["delay"] == d), None
        )
        if Path(args.rows).is_file()
        else None
    )
    print(
        json.dumps(
            {
                "delay_spec_s": spec,
                "swarm": swarm,
                "single_process_sweep": sweep
                and {
                    k: (round(v, 3) if isinstance(v, float) else v) for k, v in sweep.items() if k != "kl_by_staleness"
                },
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
