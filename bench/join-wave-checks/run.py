"""Does a wave of new samplers stall the learner, now that probation checks are budgeted per step?

In-process (no network): a real tiny-cpu LearnerLoop (prompts_per_step 8) fed from a pool of honest groups sampled
at its version 0 (it publishes no new version, so every check compares exact fp32 log-probs), re-signed under
sampler keys. Phases, each `--steps` optimiser steps, steps/s measured over the phase:
- `steady`: 4 established keys (at the floor check rate), 2 groups each per step;
- `wave`: the same, plus 100 new keys each keeping 2 groups waiting (probation: every group checked), with the
  default `trust.probation_share` (0.25: at most 2 probation checks per step); the newcomers through probation
  at the end are counted (all 100 need 400 steps: `tests/test_shaped_lies.py`);
- `wave_unbudgeted`: the same wave with probation_share 1 (every waiting probation group may be checked);
- `one_sampler`: 1 established key sending the whole step, with the default `trust.unchecked_share` (0.5: half
  of its groups checked) and with 1 (no per-key limit): what the per-key budget costs a one-sampler run.

    python bench/join-wave-checks/run.py --steps 40 --out bench/join-wave-checks/results.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from test_poisoned_groups import copy_of  # noqa: E402

from swarmnode.config import load_config  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.learner.buffer import ReplayBuffer  # noqa: E402
from swarmnode.learner.loop import LearnerLoop  # noqa: E402
from swarmnode.learner.mismatch import Mismatch  # noqa: E402
from swarmnode.model.models import load_model, load_tokenizer  # noqa: E402
from swarmnode.sampler.build import build_engine  # noqa: E402
from swarmnode.sampler.loop import SamplerLoop  # noqa: E402
from swarmnode.tasks import build_task  # noqa: E402

PER_STEP = 8
CLEAN = Mismatch(1, 0.0, 0.0, 0.0, 0, 0.0, 0.0, None)


def pool(cfg, n: int):
    engine, task = build_engine(cfg), build_task(cfg.task)
    out: list = []
    sampler = SamplerLoop(engine, task, cfg, Identity.generate(), out.append, seed=5)
    while len(out) < n:
        sampler.step()
    return out, engine


def run(cfg, groups, engine, established: int, newcomers: int, steps: int, sets: dict) -> dict:
    c = cfg.model_copy(update={"trust": cfg.trust.model_copy(update=sets)})
    model = load_model(c.model, c.task, "cpu")
    model.load_state_dict(engine.model.state_dict())
    loop = LearnerLoop(model, load_tokenizer(c.model, c.task), build_task(c.task), c,
                       ReplayBuffer(capacity=100_000, max_staleness=10**6), publish=lambda *a: None)
    loop.publish_current()
    old = [Identity.generate() for _ in range(established)]
    for key in old:
        for _ in range(10_000):
            loop.verifier.judge(key.peer_id, CLEAN)  # established: at the floor rate
    new = [Identity.generate() for _ in range(newcomers)]
    serial, began = 0, time.perf_counter()
    checked0 = loop.verifier.counts["checked"]
    for step in range(steps):
        held = loop.buffer.stats()["per_sampler"]
        for key in new:
            while held.get(key.peer_id, 0) < 2:
                held[key.peer_id] = held.get(key.peer_id, 0) + 1
                loop.buffer.add(copy_of(groups[serial % len(groups)], key))
                serial += 1
        for key in old:
            for _ in range(PER_STEP // established):
                loop.buffer.add(copy_of(groups[serial % len(groups)], key))
                serial += 1
        loop.step()
    seconds = time.perf_counter() - began
    return {"steps": steps, "seconds": round(seconds, 2), "steps_per_s": round(steps / seconds, 3),
            "checks_per_step": round((loop.verifier.counts["checked"] - checked0) / steps, 2),
            "newcomers_out_of_probation": sum(not loop.verifier.suspect(k.peer_id) for k in new),
            "load_avg": os.getloadavg()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--newcomers", type=int, default=100)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config("tiny-cpu", ["sampler.device=cpu", "learner.device=cpu", f"learner.prompts_per_step={PER_STEP}",
                                   "learner.publish_every=100000", "model.tiny.warm_start_steps=20"])
    groups, engine = pool(cfg, 256)
    report = {"steady": run(cfg, groups, engine, 4, 0, args.steps, {})}
    report["wave"] = run(cfg, groups, engine, 4, args.newcomers, args.steps, {})
    report["steady_again"] = run(cfg, groups, engine, 4, 0, args.steps, {})
    report["wave_unbudgeted"] = run(cfg, groups, engine, 4, args.newcomers, args.steps, {"probation_share": 1.0})
    report["one_sampler"] = run(cfg, groups, engine, 1, 0, args.steps, {})
    report["one_sampler_no_key_limit"] = run(cfg, groups, engine, 1, 0, args.steps, {"unchecked_share": 1.0})
    base = (report["steady"]["steps_per_s"] + report["steady_again"]["steps_per_s"]) / 2
    report["ratios"] = {k: round(v["steps_per_s"] / base, 3) for k, v in report.items() if k != "steady"}
    report["command"] = " ".join(sys.argv)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
