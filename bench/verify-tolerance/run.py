"""Does the spot check's statistic pass honest bf16 samplers and still catch a +0.3 nats liar?

Samples honest groups with the preset's model and engine (CPU), then for each group compares what the learner
recomputes (fp32, the chunked log-prob path `SpotChecker.mismatch` uses) with what a sampler would claim:
- `fp32`: the engine's own behaviour log-probs (an honest CPU sampler);
- `bf16 logits xS`: the same weights' logits rounded through bf16, at S times the model's logit scale (S > 1
  reaches the logit magnitudes at which the GPU floor of 0.16-0.29 nats per token was measured);
- `bf16 forward`: the whole forward in bf16 (weights and activations), logits in bf16;
and the same claims shifted by +0.3 nats per token (the liar; clamped at 0 as the wire format requires).
For each: the per-token |d log p| mean and max (the floor), the false-positive rate of the statistic (the
check: the larger of the median |d| and |mean signed d|, `group_mismatch`), of the median alone and of the mean
|d| (the old check) at `trust.verify_tolerance`, and the liar's detection rate per checked group. The detection
delay follows from the check rate (`SpotChecker.rate`): printed for a liar that lies from its first group and for
one that first earns trust with honest groups.

    python bench/verify-tolerance/run.py --preset tiny-cpu --groups 64
    python bench/verify-tolerance/run.py --preset smollm2-135m --groups 24
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from verify_helpers import bf16_logprobs  # noqa: E402

from swarmnode.config import TrustConfig, load_config  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.learner.verify import SpotChecker, group_mismatch  # noqa: E402
from swarmnode.model.logprobs import completion_scores  # noqa: E402
from swarmnode.sampler.engines import build_engine  # noqa: E402
from swarmnode.sampler.loop import SamplerLoop  # noqa: E402
from swarmnode.tasks import build_task  # noqa: E402

SHIFT = 0.3
CLAIMS = {"fp32": None, "bf16 logits x1": (False, 1.0), "bf16 logits x4": (False, 4.0),
          "bf16 logits x8": (False, 8.0), "bf16 forward": (True, 1.0)}


def padded(rows: list[list[float]], n: int) -> torch.Tensor:
    return torch.tensor([r + [0.0] * (n - len(r)) for r in rows], dtype=torch.float32)


def measure(preset: str, groups: int) -> dict:
    cfg = load_config(preset, ["sampler.device=cpu"])
    engine, task = build_engine(cfg), build_task(cfg.task)
    sampled: list = []
    sampler = SamplerLoop(engine, task, cfg, Identity.generate(), sampled.append, seed=3)
    while len(sampled) < groups:
        sampler.step()
    model, pad = engine.model, engine.tokenizer.pad_token_id
    low = copy.deepcopy(model).to(torch.bfloat16)
    tolerance = TrustConfig().verify_tolerance
    stats = {name: {"median": [], "stat": [], "mean": [], "liar": [], "liar_median": [], "tok_mean": [], "tok_max": []}
             for name in CLAIMS}
    for g in sampled[:groups]:
        with torch.no_grad():
            scores = completion_scores(model, [g.prompt_tokens] * len(g.completions), g.completions, g.temperature, pad)
        n = scores.logp.shape[1]
        for name, how in CLAIMS.items():
            if how is None:
                claimed, ref = g.logprobs, scores.logp
            else:
                claimed, ref_rows = bf16_logprobs(model, g.prompt_tokens, g.completions, g.temperature, pad,
                                                  whole_forward=how[0], logit_scale=how[1], bf16_model=low)
                ref = padded(ref_rows, n)  # the learner's fp32 at the same logit scale
            claim = padded([list(map(float, c)) for c in claimed], n)
            delta = (ref.float() - claim).abs()[scores.mask]
            s = stats[name]
            s["tok_mean"].append(float(delta.mean()))
            s["tok_max"].append(float(delta.max()))
            s["median"].append(float(delta.median()))
            s["stat"].append(group_mismatch(ref, claim, scores.mask))
            s["liar_median"].append(float((ref.float() - torch.clamp(claim + SHIFT, max=0.0)).abs()[scores.mask].median()))
            s["mean"].append(float(delta.mean()))
            s["liar"].append(group_mismatch(ref, torch.clamp(claim + SHIFT, max=0.0), scores.mask))
    table = {}
    for name, s in stats.items():
        k = len(s["median"])
        table[name] = {
            "groups": k,
            "token_abs_delta_mean": round(sum(s["tok_mean"]) / k, 4),
            "token_abs_delta_max": round(max(s["tok_max"]), 4),
            "check_stat_max": round(max(s["stat"]), 4),
            "false_positive_rate_check": sum(x > tolerance for x in s["stat"]) / k,
            "false_positive_rate_median_alone": sum(x > tolerance for x in s["median"]) / k,
            "false_positive_rate_mean_abs": sum(x > tolerance for x in s["mean"]) / k,
            "liar_detection_rate_check": sum(x > tolerance for x in s["liar"]) / k,
            "liar_detection_rate_median_alone": sum(x > tolerance for x in s["liar_median"]) / k,
        }
    return {"preset": preset, "tolerance": tolerance, "shift": SHIFT, "table": table}


def delays() -> dict:
    """Expected groups of a liar that pass before its first check, by how many clean checks it earned first."""
    trust = TrustConfig()
    out = {}
    for clean in (0, trust.probation_checks, 40, 160, 1000):
        checker = SpotChecker(trust, window=17)
        for _ in range(clean):
            checker.judge("k", 0.0)
        rate = checker.rate("k")
        out[str(clean)] = {"check_rate": round(rate, 4), "expected_groups_before_caught": round(1 / rate - 1, 2)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-cpu")
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    began = time.time()
    report = {**measure(args.preset, args.groups), "delay_by_clean_checks": delays(),
              "load_avg": os.getloadavg(), "seconds": round(time.time() - began, 1)}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
