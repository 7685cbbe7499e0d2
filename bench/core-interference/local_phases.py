"""How the single-process trainer's time splits between sampling and training, and what that caps.

Runs `LocalTrainer` (the loop `swarmnode train-local` runs) for `--seconds` on the cores it is given (pin it:
`taskset -c 0`), timing each sampler batch and each learner step. Prints, per learner step: G (sampling the step's
groups), T (the step), and the ceiling of one extra core of samplers, (G + T) / max(G, T): a learner that paid
nothing but its steps, fed by samplers that paid nothing but their generation. With the learner also sampling while
it would wait (`learner.sample_when_idle`), the ceiling is 1 + G / G' (G' the samplers' cost per step), at most 2.

    taskset -c 0 python bench/core-interference/local_phases.py [--config tiny-cpu] [--seconds 20] [--set k=v ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import config_args  # noqa: E402  (also puts this checkout's package first on sys.path)
from swarmnode.config import load_config  # noqa: E402
from swarmnode.local.trainer import LocalTrainer  # noqa: E402


def timed_round(trainer: LocalTrainer) -> tuple[float, float | None]:
    """One round of `train-local`'s loop, its halves timed: seconds for the sampler's batch, and seconds per
    learner step taken on it (None when the batch was too small for a step)."""
    trainer._deliver()
    t0 = time.perf_counter()
    trainer.sampler.step()
    t1 = time.perf_counter()
    taken = 0
    while trainer.learner.step() is not None:
        taken += 1
    return t1 - t0, (time.perf_counter() - t1) / taken if taken else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config_args(ap, "tiny-cpu")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cfg = load_config(args.config, args.sets)
    trainer = LocalTrainer(cfg, progress=None)
    batches, steps = [], []
    began = time.monotonic()
    while time.monotonic() - began < args.seconds:
        batch, step = timed_round(trainer)
        batches.append(batch)
        if step is not None:
            steps.append(step)
    per_step = cfg.learner.prompts_per_step / cfg.sampler.prompts_per_batch
    g, t = statistics.median(batches) * per_step, statistics.median(steps)
    out = {
        "config": args.config,
        "sets": args.sets,
        "steps": len(steps),
        "sample_ms_per_step": round(g * 1e3, 1),
        "train_ms_per_step": round(t * 1e3, 1),
        "ceiling_one_sampler_core": round((g + t) / max(g, t), 2),
    }
    print(
        json.dumps(out)
        if args.json
        else f"{args.config} {args.sets}: G {out['sample_ms_per_step']} ms, T {out['train_ms_per_step']} ms per step "
        f"({out['steps']} steps); one extra core of samplers: at most {out['ceiling_one_sampler_core']}x"
    )


if __name__ == "__main__":
    main()
