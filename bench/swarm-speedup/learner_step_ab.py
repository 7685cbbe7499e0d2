"""A learner step of two source trees on the same groups, pinned to one core: is the new code path cheaper?

Each tree (a checkout of the repository, e.g. `git worktree add /tmp/old <rev>`) runs, in a subprocess that
imports `swarmnode` from that tree, the same thing: tiny-cpu's sampler makes `--groups` groups once (seeded, so
both trees train on identical data when their sampler code agrees), then a fresh `LearnerLoop` (no checkpoints,
no publishing) steps over them until they run out; the CPU time per step of the training thread is printed.
Trees alternate for `--rounds` rounds so machine load hits both alike; medians and the ratio new/old are reported.

    python bench/swarm-speedup/learner_step_ab.py --old /tmp/old [--new .] [--rounds 5] [--groups 480] [--core 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT, pin  # noqa: E402  (also puts this checkout's package first on sys.path)


def inner(groups_wanted: int) -> None:
    """Runs inside the tree under test (its `swarmnode` is first on sys.path): print CPU ms per learner step."""
    import time

    import torch

    from swarmnode.config import load_config
    from swarmnode.identity import Identity
    from swarmnode.learner.buffer import ReplayBuffer
    from swarmnode.learner.loop import LearnerLoop
    from swarmnode.model.models import load_model, load_tokenizer
    from swarmnode.sampler.build import build_engine
    from swarmnode.sampler.loop import SamplerLoop
    from swarmnode.tasks import build_task

    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = load_config("tiny-cpu", [])
    task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
    groups: list = []
    sampler = SamplerLoop(build_engine(cfg), task, cfg.sampler, cfg.run_id, Identity.generate(), groups.append, seed=0)
    while len(groups) < groups_wanted:
        sampler.step()
    buffer = ReplayBuffer(len(groups) + 1, 1 << 30)
    learner = LearnerLoop(load_model(cfg.model, cfg.task), tokenizer, task, cfg, buffer)
    for group in groups:
        buffer.add(group)
    began, steps = time.thread_time(), 0
    while len(buffer) >= cfg.learner.prompts_per_step:
        learner.step()
        steps += 1
    print(json.dumps({"ms_per_step": 1000 * (time.thread_time() - began) / steps, "steps": steps}))


def run_tree(tree: Path, groups: int, core: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [*pin(core), sys.executable, "-P", __file__, "--inner", str(groups)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["ms_per_step"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, default=None, help="checkout of the old code path (required)")
    ap.add_argument("--new", type=Path, default=ROOT, help="checkout of the new code path (default: this one)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--groups", type=int, default=480, help="groups sampled once (8 per step in tiny-cpu)")
    ap.add_argument("--core", default="0")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--inner", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner is not None:
        inner(args.inner)
        return
    if args.old is None:
        ap.error("--old is required (a checkout of the old code path, e.g. git worktree add /tmp/old <rev>)")
    times: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for name, tree in (("old", args.old), ("new", args.new)):
            times[name].append(run_tree(tree.resolve(), args.groups, args.core))
    med = {k: statistics.median(v) for k, v in times.items()}
    doc = {
        "ms_per_step": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "median_ms": {k: round(v, 2) for k, v in med.items()},
        "new_over_old": round(med["new"] / med["old"], 3),
    }
    if args.json:
        print(json.dumps(doc))
    else:
        print(
            f"old {doc['median_ms']['old']} ms/step, new {doc['median_ms']['new']} ms/step (median of "
            f"{args.rounds}; new/old {doc['new_over_old']}); all: {doc['ms_per_step']}"
        )


if __name__ == "__main__":
    main()
