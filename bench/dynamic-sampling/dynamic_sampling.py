"""Signal-carrying groups per sampler-hour on a task near saturation, before and after dynamic sampling and the
prompt skip, arm beside arm in one process.

The tiny model is warm-started near saturation on its arithmetic task (`model.tiny.warm_start_steps=300`,
`warm_start_correct=1.0`: reward ~0.9, about half the groups all-solved). Each arm is a `LocalTrainer` (one
sampler, one learner, on-policy) from that same model and seed; the arms take turns, `--per-turn` sampler batches
each (then its learner takes every step its buffer allows: with the default 4 batches, 16 groups, two steps' draw,
as a swarm learner whose samplers keep its buffer filled holds), so each gets the same sampler batches under the
same machine load:
- `before`: neither;
- `skip`: the sampler takes the learner's saturated prompts before each batch (what a swarm learner's acks carry,
  the ack's `s`: `SaturatedPrompts.news_for`) and redraws them (`sampler.prompt_skip`);
- `dynamic`: `learner.dynamic_sampling=true` (the learner fills each step with groups that carry signal);
- `after`: both.
Per arm: sampler batches and seconds, groups made and those with signal (rewards not all equal), learner steps
and seconds, signal-carrying groups trained (and per step, and learner seconds per one), the held-out reward at
the end. Ratios are against `before` of the same seed.

    python bench/dynamic-sampling/dynamic_sampling.py [--batches 200] [--per-turn 4] [--seeds 0,1,2] [--arms before,skip,dynamic,after]
        [--config tiny-cpu] [--set key=value ...] [--out bench/dynamic-sampling/results/run]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no loading bar per arm (as the CLI)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
import torch  # noqa: E402

from benchlib import config_args, write_results  # noqa: E402
from swarmnode.config import load_config  # noqa: E402
from swarmnode.local.trainer import LocalTrainer  # noqa: E402

NEAR_SATURATION = ["model.tiny.warm_start_steps=300", "model.tiny.warm_start_correct=1.0"]
ARMS = {"before": (False, False), "skip": (False, True), "dynamic": (True, False), "after": (True, True)}
LOCAL = "local"  # the sampler's name in the learner's record of who was told what


@dataclass
class Arm:
    """One arm's trainer and tallies."""

    name: str
    trainer: LocalTrainer
    skip: bool
    batches: int = 0
    sampler_s: float = 0.0
    learner_s: float = 0.0
    made: int = 0
    made_signal: int = 0
    records: list[dict] = field(default_factory=list)

    def turn(self, batches: int) -> None:
        """`batches` sampler batches (the told prompts taken first, with `skip`), then every step the buffer
        allows."""
        t = self.trainer
        t._deliver()
        for _ in range(batches):
            if self.skip:
                t.sampler.skipped.update(t.learner.saturated.news_for(LOCAL))
            began = time.perf_counter()
            groups = t.sampler.step()
            self.sampler_s += time.perf_counter() - began
            self.batches += 1
            self.made += len(groups)
            self.made_signal += sum(len(set(g.rewards)) > 1 for g in groups)
        began = time.perf_counter()
        while (record := t.learner.step()) is not None:
            self.records.append(record)
        self.learner_s += time.perf_counter() - began

    def result(self) -> dict:
        trained = [r for r in self.records if r.get("trained")]
        signal_trained = sum(round(r["groups"] * (1 - r["zero_signal_fraction"])) for r in self.records)
        rewards = [r["reward_mean"] for r in trained]
        tail = rewards[-max(1, len(rewards) // 5) :]
        hours = self.sampler_s / 3600
        return {
            "arm": self.name,
            "batches": self.batches,
            "sampler_s": round(self.sampler_s, 2),
            "learner_s": round(self.learner_s, 2),
            "groups_made": self.made,
            "signal_made": self.made_signal,
            "signal_share": round(self.made_signal / max(1, self.made), 4),
            "signal_made_per_sampler_hour": round(self.made_signal / hours, 1) if hours else None,
            "steps": len(trained),
            "signal_trained": signal_trained,
            "signal_trained_per_sampler_hour": round(signal_trained / hours, 1) if hours else None,
            "signal_groups_per_step": round(signal_trained / max(1, len(trained)), 3),
            "learner_s_per_signal_group": round(self.learner_s / max(1, signal_trained), 4),
            "prompts_redrawn": self.trainer.sampler.skipped.redrawn,
            "reward_last_fifth": round(statistics.fmean(tail), 4) if tail else None,
            "held_out": round(self.trainer.evaluate_now()["eval_reward"], 4),
        }


def run_seed(cfg_spec: str, sets: list[str], arms: list[str], batches: int, per_turn: int, seed: int) -> list[dict]:
    out: list[Arm] = []
    for name in arms:
        dynamic, skip = ARMS[name]
        cfg = load_config(cfg_spec, [*NEAR_SATURATION, *sets, f"learner.dynamic_sampling={str(dynamic).lower()}"])
        random.seed(seed)
        torch.manual_seed(seed)
        out.append(Arm(name, LocalTrainer(cfg, staleness=0, progress=None, seed=seed), skip))
    for _ in range(batches // per_turn):  # turn by turn, arm after arm: the same load on each
        for arm in out:
            arm.turn(per_turn)
    return [{"seed": seed, **arm.result()} for arm in out]


T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}  # t, 95 %


def ratio_summary(rows: list[dict], key: str, arm: str) -> dict | None:
    """`arm`'s `key` over `before`'s, paired by seed: the mean, the seeds' standard deviation and the 95 %
    t-interval's half-width (none from one seed)."""
    base = {r["seed"]: r[key] for r in rows if r["arm"] == "before" and r[key]}
    ratios = [r[key] / base[r["seed"]] for r in rows if r["arm"] == arm and r["seed"] in base and r[key] is not None]
    if not ratios:
        return None
    sd = statistics.stdev(ratios) if len(ratios) > 1 else None
    half = T975.get(len(ratios) - 1, 1.96) * sd / len(ratios) ** 0.5 if sd is not None else None
    return {
        "mean": round(statistics.fmean(ratios), 3),
        "sd": round(sd, 3) if sd is not None else None,
        "ci95": round(half, 3) if half is not None else None,
    }


def table(rows: list[dict], arms: list[str]) -> str:
    keys = [
        "signal_share",
        "signal_made_per_sampler_hour",
        "signal_trained_per_sampler_hour",
        "signal_groups_per_step",
        "learner_s_per_signal_group",
        "steps",
        "held_out",
    ]
    lines = ["| arm | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        cells = [str(round(statistics.fmean(r[k] for r in mine), 3)) for k in keys]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config_args(ap)
    ap.add_argument("--batches", type=int, default=200, help="sampler batches per arm and seed")
    ap.add_argument("--per-turn", type=int, default=4, help="sampler batches an arm makes before its learner steps")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--out", type=Path, default=None, help="results path without suffix (.json and .md written)")
    args = ap.parse_args()
    arms = args.arms.split(",")
    if unknown := [a for a in arms if a not in ARMS]:
        ap.error(f"unknown arm(s) {', '.join(unknown)}: expected {', '.join(ARMS)}")
    if args.batches < 1 or not 1 <= args.per_turn <= args.batches:
        ap.error("--batches must be >= 1 and --per-turn between 1 and --batches")
    if "before" not in arms:
        ap.error("the arms must include before (the baseline of the ratios)")
    torch.set_num_threads(1)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    began, cpu = time.monotonic(), time.process_time()
    rows = [
        r
        for seed in map(int, args.seeds.split(","))
        for r in run_seed(args.config, args.sets, arms, args.batches, args.per_turn, seed)
    ]
    ratios = {
        arm: {
            k: ratio_summary(rows, k, arm)
            for k in (
                "signal_made_per_sampler_hour",
                "signal_share",
                "signal_trained_per_sampler_hour",
                "signal_groups_per_step",
            )
        }
        for arm in arms
        if arm != "before"
    }
    doc = {
        "config": args.config,
        "sets": [*NEAR_SATURATION, *args.sets],
        "batches": args.batches,
        "per_turn": args.per_turn,
        "seeds": args.seeds,
        "load_before": load,
        "load_after": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "wall_s": round(time.monotonic() - began, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "rows": rows,
        "ratios_to_before": ratios,
    }
    text = (
        table(rows, arms)
        + "\n\nratios to before, paired by seed (mean +- 95 % t-interval):\n"
        + "\n".join(
            f"- {arm}: " + ", ".join(f"{k} {v['mean']} +- {v['ci95']}" for k, v in r.items() if v)
            for arm, r in ratios.items()
        )
    )
    print(text)
    print(f"wall {doc['wall_s']} s, CPU {doc['cpu_s']} s, load {doc['load_before']} -> {doc['load_after']}")
    write_results(args.out, doc, text + "\n")


if __name__ == "__main__":
    main()
