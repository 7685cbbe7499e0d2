"""Held-out reward of SmolLM2-135M-Instruct on the word-problem task, before and after a run, over several seeds.

    python bench/smollm2/smollm2_heldout.py                                  # the pretrained model only
    python bench/smollm2/smollm2_heldout.py --checkpoint DEMO/learner/checkpoints/checkpoint.pt

Each evaluation samples `--samples` completions per held-out prompt at the preset's temperature and completion
length (`swarmnode.local.evaluation.evaluate`, its own seeded random stream) and reports mean@k and the share that are
exactly right (0.8 for the number + 0.2 for the box = 1.0). The spread over `--seeds` is the seed-to-seed
spread a rise must beat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
import torch  # noqa: E402

from benchlib import config_args  # noqa: E402  (also puts this checkout's package first on sys.path)
from swarmnode.config import load_config  # noqa: E402
from swarmnode.local.evaluation import evaluate  # noqa: E402
from swarmnode.model.models import load_model, load_tokenizer  # noqa: E402
from swarmnode.tasks import build_task  # noqa: E402


def run(model, tokenizer, task, cfg, seeds: list[int], samples: int) -> dict:
    rows, seconds = [], []
    for seed in seeds:
        start = time.perf_counter()
        rows.append(
            evaluate(
                model,
                tokenizer,
                task,
                samples=samples,
                temperature=cfg.sampler.temperature,
                max_new_tokens=cfg.sampler.max_completion_length,
                max_prompt_tokens=cfg.sampler.max_prompt_length,
                seed=seed,
            )
        )
        seconds.append(time.perf_counter() - start)
    rewards = [r["eval_reward"] for r in rows]
    return {
        "eval_reward_per_seed": [round(x, 4) for x in rewards],
        "eval_reward_mean": round(statistics.fmean(rewards), 4),
        "seed_spread": round(max(rewards) - min(rewards), 4),
        "eval_exact_per_seed": [round(r["eval_exact"], 4) for r in rows],
        "seconds_per_eval": [round(t, 1) for t in seconds],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config_args(parser, "smollm2-135m")
    parser.add_argument("--checkpoint", help="a learner checkpoint.pt to evaluate after the base model")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "2")))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.sets)
    task = build_task(cfg.task)
    tokenizer = load_tokenizer(cfg.model, cfg.task)
    model = load_model(cfg.model, cfg.task, "cpu")
    out = {
        "config": args.config,
        "sets": args.sets,
        "eval_prompts": len(task.eval_prompts()),
        "samples": args.samples,
        "load_average": os.getloadavg(),
    }
    out["base"] = run(model, tokenizer, task, cfg, args.seeds, args.samples)
    if args.checkpoint:
        state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        out["trained"] = run(model, tokenizer, task, cfg, args.seeds, args.samples)
        out["trained"]["learner_step"] = int(state["step"])
        out["rise"] = round(out["trained"]["eval_reward_mean"] - out["base"]["eval_reward_mean"], 4)
    out["load_average_end"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
