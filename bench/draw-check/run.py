"""Do the seeded-draw replay and the typicality check pass every honest group, catch chosen text, and what do they
cost against a learner's step?

Samples honest seeded groups (`trust.seeded_groups`) with the preset's model and the transformers engine on the
CPU, `--groups` of them at `--temperature` from sampler seed `--seed`, and for each batch of 32 groups:
- replays the draws the way a spot check does (`model.replay.replay_scores`, `learner.draw_check.judge_draws` at
  `trust.draw_tolerance`) with the learner's fp32 weights and with the whole forward in bf16 (another engine's
  numbers): false positives, the largest honest gap and the tokens past the tolerance;
- computes the typicality statistic of `learner.typicality` from an fp32 forward (false positives at
  `trust.typicality_z`, the largest honest score);
- tells the chosen-text lie about every group (half its completions replaced by a marker, log-probs honestly
  recomputed) and counts the groups each check catches;
- times, per group, the spot check's forward without the replay (`completion_scores`) and with it, and a
  learner step (`LearnerLoop._optimise` over `prompts_per_step` groups, with and without the typicality sums).
Writes JSON.

    python bench/draw-check/run.py --groups 2560 --seed 1 --out bench/draw-check/results/seed1.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from collections import Counter
from pathlib import Path

import torch

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.draw_check import judge_draws
from swarmnode.learner.loop import LearnerLoop
from swarmnode.learner.typicality import SLACK_NATS
from swarmnode.model.draws import completion_seeds, group_seed
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.replay import draw_gaps, replay_scores
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.tasks import build_task

BATCH = 32
MARKER = "ZZZZ"


def flat(groups):
    return (
        [g.prompt_tokens for g in groups for _ in g.completions],
        [c for g in groups for c in g.completions],
        [g.temperature for g in groups for _ in g.completions],
    )


def per_group(groups, values: torch.Tensor, mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out, row = [], 0
    for g in groups:
        n = len(g.completions)
        out.append((values[row : row + n], mask[row : row + n]))
        row += n
    return out


def replay_figures(model, groups, pad: int, tolerance: float) -> dict:
    """Per group (passes, tokens past the tolerance, largest gap) of the replay under `model`."""
    prompts, comps, temps = flat(groups)
    scores = replay_scores(model, prompts, comps, temps, pad)
    seeds = [s for g in groups for s in completion_seeds(group_seed(g.run_id, g.sampler_id, *g.draw[:2]), 8)]
    gaps = draw_gaps(scores, seeds)
    out = []
    for gap, mask in per_group(groups, gaps, scores.mask):
        off, tokens, passed = judge_draws(gap, mask, tolerance)
        out.append((passed, off, float(gap[mask].max()) if tokens else 0.0))
    return {"groups": out, "scores": scores}


def typicality(model, groups, pad: int) -> list[float]:
    """Each group's largest typicality score ((S - slack) / sqrt(sum V), over the group and its completions)."""
    prompts, comps, temps = flat(groups)
    with torch.no_grad():
        s = completion_scores(model, prompts, comps, temps, pad, variance=True)
    excess = ((-s.logp - s.entropy) * s.mask).sum(dim=1)
    var = (s.variance * s.mask).sum(dim=1).clamp(min=1e-6)
    out, row = [], 0
    for g in groups:
        n = len(g.completions)
        e, v = excess[row : row + n], var[row : row + n]
        row += n
        scores = ((e - SLACK_NATS) / v.sqrt()).tolist() + [float((e.sum() - SLACK_NATS) / v.sum().sqrt())]
        out.append(max(scores))
    return out


def chosen(model, groups, marker: list[int], pad: int):
    """The chosen-text lie: every other completion replaced by `marker`, honest log-probs (same draw fields)."""
    out = []
    for g in groups:
        comps = [marker if j % 2 else c for j, c in enumerate(g.completions)]
        out.append(type(g)(**{**g.__dict__, "completions": comps}))
    return out


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - began)
    return best


def costs(cfg, model, tokenizer, task, groups, pad: int) -> dict:
    """Seconds per group of the spot check's forward without and with the replay; seconds per learner step."""
    g = groups[0]
    args = ([g.prompt_tokens] * len(g.completions), g.completions, g.temperature, pad)
    with torch.no_grad():
        old = timed(lambda: completion_scores(model, *args), 5)
    seeds = completion_seeds(group_seed(g.run_id, g.sampler_id, *g.draw[:2]), len(g.completions))
    new = timed(lambda: judge_draws(draw_gaps(s := replay_scores(model, *args), seeds), s.mask, 0.02), 5)
    loop = LearnerLoop(model, tokenizer, task, cfg, ReplayBuffer.from_config(cfg), publish=None)
    signal = [rows for x in groups if (rows := loop.rows.rows(x, 0)) and len({r.reward for r in rows}) > 1]
    step_groups = signal[: cfg.learner.prompts_per_step]
    with_sums = timed(lambda: (loop._optimise(step_groups), loop.typical.flagged_now()), 15)
    loop.typical.z = 0.0
    without = timed(lambda: loop._optimise(step_groups), 15)
    return {
        "check_forward_s": old,
        "check_with_replay_s": new,
        "step_s": without,
        "step_with_typicality_s": with_sums,
        "step_groups": len(step_groups),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny-cpu")
    ap.add_argument("--groups", type=int, default=2560)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = load_config(
        a.preset,
        ["sampler.device=cpu", "trust.seeded_groups=true", f"sampler.temperature={a.temperature}"]
        + [f"sampler.prompts_per_batch={BATCH}"],
    )
    torch.manual_seed(a.seed)
    engine, task = build_engine(cfg), build_task(cfg.task)
    pad, tol, z = engine.tokenizer.pad_token_id, cfg.trust.draw_tolerance, cfg.trust.typicality_z
    marker = engine.tokenizer.encode(MARKER, add_special_tokens=False)
    out: list = []
    all_groups: list = []
    sampler = SamplerLoop(
        engine,
        task,
        cfg.sampler,
        cfg.run_id,
        Identity.generate(),
        out.append,
        seed=a.seed,
        seeded=cfg.trust.seeded_groups,
        stream=a.seed,
    )
    model = engine.model
    bf16 = copy.deepcopy(model).to(torch.bfloat16)  # the same weights, another engine's numbers
    counts: Counter[str] = Counter()
    worst = {"fp32_gap": 0.0, "bf16_gap": 0.0, "typical": -1e9, "lie_typical_min": 1e9}
    began, gen_s = time.time(), 0.0
    while counts["groups"] < a.groups:
        t0 = time.perf_counter()
        out.clear()
        sampler.step()
        gen_s += time.perf_counter() - t0
        groups = out[:BATCH]
        all_groups = groups
        counts["groups"] += len(groups)
        counts["tokens"] += sum(len(c) for g in groups for c in g.completions)
        for name, replayer in (("fp32", model), ("bf16", bf16)):
            for passed, off, gap in replay_figures(replayer, groups, pad, tol)["groups"]:
                counts[f"{name}_false_positives"] += not passed
                counts[f"{name}_tokens_past_tolerance"] += off
                worst[f"{name}_gap"] = max(worst[f"{name}_gap"], gap)
        scores = typicality(model, groups, pad)
        counts["typical_false_positives"] += sum(s > z for s in scores)
        worst["typical"] = max(worst["typical"], max(scores))
        lies = chosen(model, groups, marker, pad)
        counts["lies"] += len(lies)
        counts["lies_caught_by_replay"] += sum(not p for p, _, _ in replay_figures(model, lies, pad, tol)["groups"])
        lie_scores = typicality(model, lies, pad)
        counts["lies_caught_by_typicality"] += sum(s > z for s in lie_scores)
        worst["lie_typical_min"] = min(worst["lie_typical_min"], min(lie_scores))
    result = {
        "preset": a.preset,
        "seed": a.seed,
        "temperature": a.temperature,
        "draw_tolerance": tol,
        "typicality_z": z,
        "counts": dict(counts),
        "worst": worst,
        "generation_s_per_group": gen_s / counts["groups"],
        "costs": costs(cfg, model, engine.tokenizer, task, all_groups, pad),
        "seconds": time.time() - began,
        "load": os.getloadavg(),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
