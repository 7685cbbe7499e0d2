"""What spot verification of samplers costs the learner (issue #20; goal: <= 10 % of learner time at the default
rate).

Runs `train-local` (sampler and learner in one process, on-policy, so every group is checkable) for `--steps`
learner steps at each verification fraction (0 = the baseline, the default `trust.verify_fraction`, and 1.0 for
scale), timing only the learner's steps, and reports the time spent recomputing log-probs as a share of the
learner's time, and each run's learner seconds per step against the baseline's (same process, same seed).

    python bench/verify-cost/verify_cost.py --steps 60 --out bench/verify-cost/results/verify_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from swarmnode.config import TrustConfig, load_config  # noqa: E402
from swarmnode.local.trainer import LocalTrainer  # noqa: E402


def run(fraction: float, steps: int, sets: list[str]) -> dict:
    cfg = load_config("tiny-cpu", [*sets, f"trust.verify_fraction={fraction}"])
    trainer = LocalTrainer(cfg, staleness=0, progress=None, seed=0)
    step, spent = trainer.learner.step, [0.0]

    def timed():
        began = time.perf_counter()
        try:
            return step()
        finally:
            spent[0] += time.perf_counter() - began

    trainer.learner.step = timed
    trainer.run(steps)
    verifier = trainer.learner.verifier
    return {
        "fraction": fraction,
        "learner_seconds": round(spent[0], 3),
        "steps": trainer.learner.step_count,
        "verify_seconds": round(verifier.seconds, 3),
        "checked": verifier.counts["checked"],
        "rejected": verifier.counts["rejected"],
        "verify_share_of_learner_time": round(verifier.seconds / spent[0], 4) if spent[0] else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    sets = ["learner.device=cpu", "sampler.device=cpu"]
    default = TrustConfig().verify_fraction
    runs = [run(f, args.steps, sets) for f in (0.0, default, 1.0)]
    base = runs[0]["learner_seconds"] / max(1, runs[0]["steps"])
    for r in runs:
        r["seconds_per_step_vs_baseline"] = round(r["learner_seconds"] / max(1, r["steps"]) / base, 3)
    report = {
        "bench": "verify_cost",
        "default_fraction": default,
        "runs": runs,
        "load_avg": os.getloadavg(),
        "command": " ".join(sys.argv),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
