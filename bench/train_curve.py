"""Reward curves of `train-local` for gepo / gspo / grpo at one or more artificial staleness values.

Each run starts from the same warm-started tiny model and seed. Printed per run: mean reward over the first and
last 10% of steps, the curve in tenths, and final step diagnostics; end gain is also given relative to grpo at
the same staleness (the baseline measured in this run).

    python bench/train_curve.py [--steps 200] [--staleness 0 4] [--loss gepo gspo grpo] [--set k=v ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from swarmnode.config import LEVEL_OF_ALGORITHM, load_config
from swarmnode.local_trainer import LocalTrainer


def tenths(values: list[float]) -> list[float]:
    k = max(1, len(values) // 10)
    return [round(statistics.fmean(values[i : i + k]), 3) for i in range(0, len(values), k)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny-cpu")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--staleness", type=int, nargs="+", default=[0])
    ap.add_argument("--loss", nargs="+", default=["grpo", "gspo", "gepo"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    runs = []
    for tau in args.staleness:
        for lt in args.loss:
            torch.manual_seed(0)
            cfg = load_config(args.config, [*args.sets, f"learner.importance_sampling_level={LEVEL_OF_ALGORITHM[lt]}"])
            r = LocalTrainer(cfg, staleness=tau, progress=None).run(args.steps)
            rewards = [p["reward_mean"] for p in r["curve"]]
            last = r["curve"][-1] if r["curve"] else {}
            runs.append({"loss_type": lt, "staleness": tau, "reward_start": r["reward_start"],
                         "reward_end": r["reward_end"], "curve_tenths": tenths(rewards),
                         "final": {k: last.get(k) for k in ("is_weight_var", "clip_fraction", "kl", "grad_norm")}})
            if not args.json:
                x = runs[-1]
                print(f"{lt:5s} tau={tau:<3d} reward {x['reward_start']:.3f} -> {x['reward_end']:.3f}  "
                      f"tenths {x['curve_tenths']}  final {x['final']}", flush=True)
    for x in runs:
        base = next((b for b in runs if b["loss_type"] == "grpo" and b["staleness"] == x["staleness"]), None)
        if base:
            gain, base_gain = x["reward_end"] - x["reward_start"], base["reward_end"] - base["reward_start"]
            x["gain_ratio_to_grpo"] = gain / base_gain if base_gain else None
    if args.json:
        print(json.dumps(runs, indent=2))
    else:
        for x in runs:
            print(f"{x['loss_type']:5s} tau={x['staleness']:<3d} gain ratio to grpo: {x.get('gain_ratio_to_grpo')}")


if __name__ == "__main__":
    main()
