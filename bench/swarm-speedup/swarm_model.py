"""What the swarm bench should show, from measured parts: steps/s and time to the held-out target of a learner on
one core fed by one sampler on another (`warm-pull` with `sample_when_idle`), against `train-local` on one core.

The learner core spends each step's `step_ms` plus `learner_overhead_ms` (receiving, checking, publishing) and,
when the sampler sent too little, its own batch (`own_batch_ms`, one step's groups); the sampler makes one step's
groups every `sampler_batch_ms + sampler_overhead_ms` (generation, catching up with the newest version). Both arms
pay `start_s` before their first step and need `steps` steps to the target. The parts come from
`bench/core-interference/core_interference.py` (generation and step with the other core idle or busy), which is how the model tells
what the swarm would do on cores that do not slow each other: the swarm keeps both cores busy, `train-local` one.

    python bench/swarm-speedup/swarm_model.py bench/swarm-speedup/results/core_interference_s17.json [--steps 100] [--start 3.8]
        [--swarm-start 4.1] [--learner-overhead 10] [--sampler-overhead 13]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def swarm_steps_per_s(
    step_ms: float,
    own_batch_ms: float,
    sampler_batch_ms: float,
    learner_overhead_ms: float = 10.0,
    sampler_overhead_ms: float = 13.0,
) -> float:
    """The learner's steps/s: per second of its core, r * (step + overhead) + (r - s) * own_batch = 1000 ms, s the
    sampler's steps' worth of groups per second; no more than the learner trains when it never generates."""
    fed = 1000.0 / (sampler_batch_ms + sampler_overhead_ms)
    per_step = step_ms + learner_overhead_ms
    return min(1000.0 / per_step, (1000.0 + fed * own_batch_ms) / (per_step + own_batch_ms))


def local_steps_per_s(generate_ms: float, step_ms: float) -> float:
    """`train-local`: one batch, then one step, on one core."""
    return 1000.0 / (generate_ms + step_ms)


def predict(
    summary: dict, steps: float, start: float, swarm_start: float, learner_overhead: float, sampler_overhead: float
) -> dict:
    """Steps/s and times to the target: `train-local` (other core idle), the swarm as it runs here (both cores
    slowed by each other: `busy` figures) and on independent cores (`idle` figures for both)."""
    gen, train = summary["generate_ms"], summary["train_ms"]
    local = local_steps_per_s(gen["idle"], train["idle"])
    out = {"train-local": {"steps_per_s": local, "time_to_target_s": start + steps / local}}
    for name, mode in (("swarm, cores slowing each other", "busy"), ("swarm, independent cores", "idle")):
        rate = swarm_steps_per_s(train[mode], gen[mode], gen[mode], learner_overhead, sampler_overhead)
        out[name] = {"steps_per_s": rate, "time_to_target_s": swarm_start + steps / rate}
    base = out["train-local"]
    for row in out.values():
        row["steps_ratio"] = row["steps_per_s"] / base["steps_per_s"]
        row["speed_up"] = base["time_to_target_s"] / row["time_to_target_s"]
    return {k: {m: round(v, 3) for m, v in row.items()} for k, row in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "interference", type=Path, help="a bench/core-interference/core_interference.py results document (.json)"
    )
    ap.add_argument("--steps", type=float, default=100.0, help="steps to the held-out target (both arms)")
    ap.add_argument("--start", type=float, default=3.8, help="seconds before train-local's first step")
    ap.add_argument("--swarm-start", type=float, default=4.1, help="seconds before the warm learner's first step")
    ap.add_argument("--learner-overhead", type=float, default=10.0, help="ms per step the learner spends besides it")
    ap.add_argument("--sampler-overhead", type=float, default=13.0, help="ms per batch the sampler spends besides it")
    args = ap.parse_args()
    try:
        summary = json.loads(args.interference.read_text())["summary"]
        if not all(summary[work][mode] > 0 for work in ("generate_ms", "train_ms") for mode in ("idle", "busy")):
            raise ValueError("a time is not positive")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.exit(f"{args.interference}: not a core_interference results document ({type(exc).__name__}: {exc})")
    rows = predict(summary, args.steps, args.start, args.swarm_start, args.learner_overhead, args.sampler_overhead)
    print("| arm | steps/s | ratio | time to target (s) | speed-up |\n|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['steps_per_s']:.2f} | {r['steps_ratio']:.2f}x | {r['time_to_target_s']:.1f} | "
            f"{r['speed_up']:.2f}x |"
        )


if __name__ == "__main__":
    main()
