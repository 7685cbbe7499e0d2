"""Does a wave of new samplers stall the learner, now that probation checks are budgeted per step?

In-process (no network): a real tiny-cpu LearnerLoop (prompts_per_step 8) fed from a pool of honest groups sampled
at its version 0 (it publishes no new version, so every check compares exact fp32 log-probs), re-signed under
sampler keys. Five arms, each a learner of its own, step in turn (one step each per round, `--steps` rounds), so
that the machine's load hits every arm alike; each step is timed in wall seconds and in this process's CPU
seconds (what the other agents' load does not move), and each arm's steps/s is compared with `steady`'s:
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
    sampler = SamplerLoop(engine, task, cfg.sampler, cfg.run_id, Identity.generate(), out.append, seed=5)
    while len(out) < n:
        sampler.step()
    return out, engine


class Arm:
    """One learner fed as a phase describes (see the module doc); its steps are timed one by one."""

    def __init__(self, cfg, groups, engine, established: int, newcomers: int, sets: dict) -> None:
        c = cfg.model_copy(update={"trust": cfg.trust.model_copy(update=sets)})
        model = load_model(c.model, c.task, "cpu")
        model.load_state_dict(engine.model.state_dict())
        self.loop = LearnerLoop(
            model,
            load_tokenizer(c.model, c.task),
            build_task(c.task),
            c,
            ReplayBuffer(capacity=100_000, max_staleness=10**6),
            publish=lambda *a: None,
        )
        self.loop.publish_current()
        self.groups, self.old = groups, [Identity.generate() for _ in range(established)]
        for key in self.old:
            for _ in range(10_000):
                self.loop.verifier.judge(key.peer_id, CLEAN)  # established: at the floor rate
        self.new = [Identity.generate() for _ in range(newcomers)]
        self.serial = self.steps = 0
        self.wall = self.cpu = 0.0
        self.checked0 = self.loop.verifier.counts["checked"]

    def step(self) -> None:
        """Top up the buffer as the phase sends, then one optimiser step, timed (wall and this process's CPU)."""
        held = self.loop.buffer.stats()["per_sampler"]
        for key in self.new:
            while held.get(key.peer_id, 0) < 2:
                held[key.peer_id] = held.get(key.peer_id, 0) + 1
                self.loop.buffer.add(copy_of(self.groups[self.serial % len(self.groups)], key))
                self.serial += 1
        for key in self.old:
            for _ in range(PER_STEP // len(self.old)):
                self.loop.buffer.add(copy_of(self.groups[self.serial % len(self.groups)], key))
                self.serial += 1
        wall, cpu = time.perf_counter(), time.process_time()
        self.loop.step()
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        self.steps += 1

    def report(self) -> dict:
        return {
            "steps": self.steps,
            "wall_seconds": round(self.wall, 2),
            "cpu_seconds": round(self.cpu, 2),
            "steps_per_s": round(self.steps / self.wall, 3),
            "steps_per_cpu_s": round(self.steps / self.cpu, 3),
            "checks_per_step": round((self.loop.verifier.counts["checked"] - self.checked0) / self.steps, 2),
            "newcomers_out_of_probation": sum(not self.loop.verifier.suspect(k.peer_id) for k in self.new),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--newcomers", type=int, default=100)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(
        "tiny-cpu",
        [
            "sampler.device=cpu",
            "learner.device=cpu",
            f"learner.prompts_per_step={PER_STEP}",
            "learner.publish_every=100000",
            "model.tiny.warm_start_steps=20",
        ],
    )
    groups, engine = pool(cfg, 256)
    arms = {
        "steady": Arm(cfg, groups, engine, 4, 0, {}),
        "wave": Arm(cfg, groups, engine, 4, args.newcomers, {}),
        "wave_unbudgeted": Arm(cfg, groups, engine, 4, args.newcomers, {"probation_share": 1.0}),
        "one_sampler": Arm(cfg, groups, engine, 1, 0, {}),
        "one_sampler_no_key_limit": Arm(cfg, groups, engine, 1, 0, {"unchecked_share": 1.0}),
    }
    load = [os.getloadavg()]
    for i in range(args.steps):  # one step of each arm in turn: the machine's load hits every arm alike
        for arm in arms.values():
            arm.step()
        if (i + 1) % 10 == 0:
            load.append(os.getloadavg())
            print(f"{i + 1} of {args.steps} rounds", file=sys.stderr, flush=True)
    report: dict = {name: arm.report() for name, arm in arms.items()}
    report["ratios_wall"] = {
        k: round(v["steps_per_s"] / report["steady"]["steps_per_s"], 3) for k, v in report.items() if k != "steady"
    }
    report["ratios_cpu"] = {
        k: round(v["steps_per_cpu_s"] / report["steady"]["steps_per_cpu_s"], 3)
        for k, v in report.items()
        if k not in ("steady", "ratios_wall")
    }
    report["load_avg"] = load
    report["command"] = " ".join(sys.argv)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
