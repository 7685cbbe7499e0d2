"""Learner step time of gepo / gspo / grpo on the same batch and model, printed as ratios to grpo.

One batch of real rollout groups is sampled once from the tiny model; each loss type then trains a fresh copy
of the same initial weights on exactly that batch (forward, loss, backward, clip, AdamW). Timings are medians
over repeats, interleaved across loss types so machine load hits all of them alike.

    python bench/learner_step.py [--repeats 20] [--prompts 8] [--set key=value ...] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

from swarmnode.config import LEVEL_OF_ALGORITHM, load_config
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.models import load_model, load_tokenizer
from swarmnode.sampler.engines import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.tasks import build_task

LOSS_TYPES = ("grpo", "gspo", "gepo")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny-cpu")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=8, help="groups per step")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = load_config(args.config, [f"learner.prompts_per_step={args.prompts}", "learner.max_grad_norm=1e9", "sync.max_staleness=100000",
                                    *args.sets])
    task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
    groups: list = []
    sampler = SamplerLoop(build_engine(cfg), task, cfg, Identity.generate(), groups.append)
    while len(groups) < args.prompts:
        sampler.step()
    groups = groups[: args.prompts]
    base = load_model(cfg.model, cfg.task, "cpu")
    loops = {}
    for lt in LOSS_TYPES:
        c = cfg.model_copy(update={"learner": cfg.learner.model_copy(update={"importance_sampling_level": LEVEL_OF_ALGORITHM[lt]})})
        loops[lt] = LearnerLoop(copy.deepcopy(base), tokenizer, task, c, ReplayBuffer.from_config(c))
    times: dict[str, list[float]] = {lt: [] for lt in LOSS_TYPES}
    for rep in range(args.repeats + 2):
        for lt, loop in loops.items():
            loop.buffer = ReplayBuffer.from_config(loop.cfg, version=loop.version)  # takes the same batch again
            for g in groups:
                loop.buffer.add(g)
            start = time.perf_counter()
            diag = loop.step()
            elapsed = time.perf_counter() - start
            assert diag is not None and diag.get("trained"), f"batch carried no reward signal; rerun ({diag})"
            if rep >= 2:  # two warm-up rounds
                times[lt].append(elapsed)
    med = {lt: statistics.median(t) for lt, t in times.items()}
    result = {"rows": sum(len(g.completions) for g in groups), "repeats": args.repeats,
              "median_step_s": med, "ratio_to_grpo": {lt: med[lt] / med["grpo"] for lt in LOSS_TYPES}}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"learner step, {result['rows']} completions, median of {args.repeats}:")
        for lt in LOSS_TYPES:
            print(f"  {lt:5s} {med[lt] * 1e3:8.2f} ms   x{result['ratio_to_grpo'][lt]:.3f} of grpo")


if __name__ == "__main__":
    main()
