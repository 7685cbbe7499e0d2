"""Reasoning-gym tasks in real-process swarms: (a) does a swarm's held-out reward rise beyond noise, (b) does SAPO
sharing (4 own / 4 external groups) beat the silo (8 / 0) in cumulative reward on the nine SAPO datasets?

    python bench/tasks/tasks_bench.py swarm [--config smollm2-135m] [--minutes 30] [--samples 4] [--set K=V ...]
    python bench/tasks/tasks_bench.py sapo  [--config smollm2-135m-rgym-sapo] [--nodes 8] [--steps 200] [--set K=V ...]
    python bench/tasks/tasks_bench.py signal [--config smollm2-135m] [--prompts 8] [--lengths 96 256]

`signal` samples the untrained policy on `--prompts` training prompts of the composite (G = the config's) at each
completion length and reports the mean reward, the share of groups with a reward spread (the groups a learner can
train on) and the share of completions that close an `<answer>` tag.

`swarm` starts a bootstrap, a learner and two samplers (`swarmnode join`, each its own process and p2pd, on
127.0.0.1) on a reasoning-gym composite (`COMPOSITE`, or the config's own reasoning_gym task), trains for
`--minutes`, stops the learner (which checkpoints) and scores the base and the trained policy on the same held-out
prompts with the same sampling seeds: per prompt the mean reward of `--samples` completions, then the paired
differences' mean, standard error, t and the number of prompts up / down.

`sapo` runs `--nodes` `mode=sapo` nodes twice, at `--split 4/4` and `--silo 8/0` (sapo.local_groups /
external_groups) with the same seeds, each until every node took `--steps` steps (or `--minutes`), and prints
every node's cumulative own reward over the first N steps all nodes reached (SAPO's measure).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT, use_test_helpers  # noqa: E402  (also puts this checkout's package first on sys.path)

use_test_helpers()  # the tests' process helpers
from swarm_helpers import LocalSwarm  # noqa: E402
from test_learner_restart import steps as steps_of  # noqa: E402

COMPOSITE = [
    "task.name=reasoning_gym",
    "task.args.datasets=[basic_arithmetic,base_conversion,propositional_logic]",
    "task.args.format_reward=0.2",
    "task.eval_size=32",
    "sampler.max_completion_length=96",
    "sampler.max_prompt_length=384",
]


def _sets(sets: list[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def per_prompt_rewards(cfg, state: dict | None, samples: int, seed: int) -> dict[str, float]:
    """prompt id -> mean reward of `samples` completions of the (base or trained) policy on the held-out prompts."""
    import torch

    from swarmnode.model.models import load_model, load_tokenizer
    from swarmnode.sampler.engines import HFEngine
    from swarmnode.tasks import build_task

    task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
    model = load_model(cfg.model, cfg.task, "cpu")
    if state is not None:
        model.load_state_dict(state)
    engine = HFEngine(model, tokenizer, max_prompt_tokens=cfg.sampler.max_prompt_length)
    prompts = task.eval_prompts()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gens = engine.generate(
            [p.text for p in prompts], samples, cfg.sampler.temperature, cfg.sampler.max_completion_length
        )
    return {p.prompt_id: statistics.fmean(task.score(p, g.texts).rewards or [0.0]) for p, g in zip(prompts, gens)}


def paired(before: dict[str, float], after: dict[str, float]) -> dict:
    """The paired statistic over the prompts both hold."""
    diffs = [after[k] - before[k] for k in before if k in after]
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("nan")
    return {
        "prompts": len(diffs),
        "base_mean": round(statistics.fmean(before.values()), 4),
        "trained_mean": round(statistics.fmean(after.values()), 4),
        "mean_diff": round(mean, 4),
        "se": round(se, 4),
        "t": round(mean / se, 2) if se and se == se else None,
        "up": sum(d > 0 for d in diffs),
        "down": sum(d < 0 for d in diffs),
    }


def swarm(args) -> dict:
    import torch

    from swarmnode.config import load_config

    sets = [*COMPOSITE, *args.sets] if args.composite else list(args.sets)
    cfg = load_config(args.config, sets)
    with tempfile.TemporaryDirectory(prefix="tasks-bench-") as tmp, LocalSwarm(Path(tmp), "tasks-bench", sets) as sw:
        root = Path(tmp)
        sw.bootstrap()
        common = ["--config", args.config]
        learner = sw.join(
            "learner", "learner", work=True, wait=False, extra=[*common, *_sets([f"data_dir={root / 'learner'}"])]
        )
        learner.ready_fields(timeout=1800)
        samplers = [
            sw.join(
                f"sampler{i}", "sampler", work=True, wait=False, extra=[*common, *_sets([f"data_dir={root / f's{i}'}"])]
            )
            for i in range(2)
        ]
        for s in samplers:
            s.ready_fields(timeout=1800)
        began, learner_exit = time.monotonic(), None
        while time.monotonic() - began < args.minutes * 60:
            if learner.popen.poll() is not None:  # e.g. killed for memory: its last checkpoint is scored
                learner_exit = learner.popen.returncode
                print(f"learner exited (rc {learner_exit}):\n{learner.stderr()[-3000:]}", file=sys.stderr)
                break
            time.sleep(5)
        rows = steps_of(root / "learner" / "learner_steps.jsonl")
        made = [[ln for ln in s.stdout().splitlines() if "groups made" in ln][-1:] for s in samplers]
        if learner_exit is None:
            assert learner.stop(timeout=600) == 0, learner.stderr()[-3000:]  # SIGTERM: checkpoint, leave
        saved = root / "learner" / "checkpoints" / "checkpoint.pt"
        state = torch.load(saved, map_location="cpu", weights_only=True) if saved.exists() else None
    if state is None:  # no step had a group with a reward spread: nothing to compare
        return {"learner_steps": len(rows), "samplers_last_line": made, "held_out": None}
    torch.set_num_threads(args.threads)
    base = per_prompt_rewards(cfg, None, args.samples, args.seed)
    trained = per_prompt_rewards(cfg, state["model"], args.samples, args.seed)
    return {
        "learner_steps": len(rows),
        "learner_exit": learner_exit,
        "checkpoint_version": state.get("version"),
        "samplers_last_line": made,
        "training_reward_first_last": [rows[0].get("reward_mean"), rows[-1].get("reward_mean")] if rows else None,
        "held_out": paired(base, trained),
    }


def sapo(args) -> dict:
    out = {}
    for label, (local, external) in (("share", args.split), ("silo", args.silo)):
        sets = [*args.sets, f"sapo.local_groups={local}", f"sapo.external_groups={external}", "sapo.external_wait=5"]
        with tempfile.TemporaryDirectory(prefix="tasks-sapo-") as tmp, LocalSwarm(Path(tmp), "tasks-sapo", sets) as sw:
            root = Path(tmp)
            sw.bootstrap()
            procs = [
                sw.join(
                    f"n{i}",
                    "auto",
                    work=True,
                    wait=False,
                    extra=["--config", args.config, *_sets([f"data_dir={root / f'n{i}'}"])],
                )
                for i in range(args.nodes)
            ]
            for p in procs:
                p.ready_fields(timeout=1800)
            files = [root / f"n{i}" / "sapo_steps.jsonl" for i in range(args.nodes)]
            began = time.monotonic()
            while time.monotonic() - began < args.minutes * 60 and not all(
                len(steps_of(f)) >= args.steps for f in files
            ):
                time.sleep(5)
            rows = [steps_of(f) for f in files]
        n = min(args.steps, *(len(r) for r in rows))
        cumulative = [round(sum(r["own_reward"] for r in node[:n]), 3) for node in rows]
        out[label] = {
            "split": [local, external],
            "steps_compared": n,
            "cumulative_per_node": cumulative,
            "cumulative_mean": round(statistics.fmean(cumulative), 3),
        }
    share, silo = out["share"]["cumulative_mean"], out["silo"]["cumulative_mean"]
    out["share_over_silo"] = round(share / silo, 3) if silo else None
    return out


def signal(args) -> dict:
    import random

    import torch

    from swarmnode.config import load_config
    from swarmnode.model.models import load_model, load_tokenizer
    from swarmnode.sampler.engines import HFEngine
    from swarmnode.tasks import build_task

    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, [*COMPOSITE, *args.sets] if args.composite else list(args.sets))
    task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
    engine = HFEngine(
        load_model(cfg.model, cfg.task, "cpu"), tokenizer, max_prompt_tokens=cfg.sampler.max_prompt_length
    )
    prompts = task.sample(args.prompts, random.Random(args.seed))
    out = {}
    for length in args.lengths:
        torch.manual_seed(args.seed)
        began = time.monotonic()
        gens = engine.generate([p.text for p in prompts], cfg.sampler.num_generations, cfg.sampler.temperature, length)
        rewards = [task.score(p, g.texts).rewards or [] for p, g in zip(prompts, gens)]
        texts = [t for g in gens for t in g.texts]
        out[str(length)] = {
            "mean_reward": round(statistics.fmean(r for rs in rewards for r in rs), 4),
            "groups_with_spread": sum(len(set(rs)) > 1 for rs in rewards),
            "groups": len(rewards),
            "closed_answer_tag": round(sum("</answer>" in t for t in texts) / len(texts), 3),
            "seconds": round(time.monotonic() - began),
        }
    return out


def split(text: str) -> tuple[int, int]:
    a, b = text.split("/")
    return int(a), int(b)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=["swarm", "sapo", "signal"])
    ap.add_argument("--config")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--samples", type=int, default=4, help="swarm: completions per held-out prompt")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", "2")))
    ap.add_argument("--no-composite", dest="composite", action="store_false", help="swarm: the config's own task")
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--split", type=split, default=(4, 4))
    ap.add_argument("--silo", type=split, default=(8, 0))
    ap.add_argument("--prompts", type=int, default=8, help="signal: training prompts sampled")
    ap.add_argument("--lengths", type=int, nargs="+", default=[96, 256], help="signal: completion lengths")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    args.config = args.config or ("smollm2-135m-rgym-sapo" if args.study == "sapo" else "smollm2-135m")
    started = time.time()
    result = {"swarm": swarm, "sapo": sapo, "signal": signal}[args.study](args)
    result.update(
        {
            "command": "python bench/tasks/tasks_bench.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "load_average_end": os.getloadavg(),
            "wall_s": round(time.time() - started),
        }
    )
    out = Path(args.out or ROOT / "bench" / "tasks" / "results" / f"{args.study}.json")
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
