"""Does the spot check pass every honest group and catch every shaped lie on its first checked group?

Samples honest groups with the preset's model and engine on the CPU, over several seeds and temperatures, and for
each group compares what the learner recomputes (`completion_scores`, the chunked fp32 path `SpotChecker.mismatch`
uses) with what a sampler would claim:
- `fp32`: the engine's own behaviour log-probs (an honest CPU sampler: KV-cached generation against one forward);
- `bf16 logits xS`: the same weights' logits rounded through bf16, at S times the model's logit scale (S = 8
  reaches the logit magnitudes at which the GPU floor of 0.16-0.29 nats per token was measured), against fp32 at
  the same scale;
- `bf16 forward`: the whole forward in bf16 (weights and activations), logits in bf16.
For each: the per-token |d| floor (mean, p99, max), the false positives of the check (`learner.mismatch`, at
`trust.verify_tolerance`), and each statistic's largest honest value as a share of its limit (the margin). Then
every lie of `tests/shaped_lies.family()` applied to the `fp32` and `bf16 logits x8` claims of every
`--lie-every`-th group (the bf16-like claims for every `--bf16-every`-th batch of 32 groups): the share caught
(the goal: all, on the first checked group). Writes JSON.

    python bench/verify-tolerance/run.py --groups 10240 --out bench/verify-tolerance/results.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
from shaped_lies import family, lie  # noqa: E402

from swarmnode.config import TrustConfig, load_config  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.learner.mismatch import OFF_TOKEN, group_mismatch  # noqa: E402
from swarmnode.model.logprobs import _prepare, completion_scores  # noqa: E402
from swarmnode.sampler.build import build_engine  # noqa: E402
from swarmnode.sampler.loop import SamplerLoop  # noqa: E402
from swarmnode.tasks import build_task  # noqa: E402

SEEDS = (1, 2, 3, 4)
TEMPERATURES = (0.7, 1.0, 1.4)
SCALES = (1.0, 4.0, 8.0)
BATCH = 32  # groups scored in one forward
LIE_ON = ("fp32", "bf16 logits x8")


def sample(preset: str, seed: int, temperature: float, n: int):
    """`n` honest groups at `temperature`; (groups, engine)."""
    cfg = load_config(
        preset, ["sampler.device=cpu", f"sampler.temperature={temperature}", "sampler.prompts_per_batch=32"]
    )
    torch.manual_seed(seed)
    engine, task = build_engine(cfg), build_task(cfg.task)
    out: list = []
    sampler = SamplerLoop(engine, task, cfg.sampler, cfg.run_id, Identity.generate(), out.append, seed=seed)
    while len(out) < n:
        sampler.step()
    return out[:n], engine


def claims(
    model, low, groups, pad: int, bf16: bool
) -> tuple[dict[str, tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """Per variant (reference, claimed) [rows, T] log-probs for `groups` (the bf16 ones when `bf16`), and the
    token mask."""
    prompts = [g.prompt_tokens for g in groups for _ in g.completions]
    comps = [c for g in groups for c in g.completions]
    temps = [g.temperature for g in groups for _ in g.completions]
    with torch.no_grad():
        scores = completion_scores(model, prompts, comps, temps, pad)
    engine = torch.zeros_like(scores.logp)
    for i, lp in enumerate(lp for g in groups for lp in g.logprobs):
        engine[i, : len(lp)] = torch.tensor(lp, dtype=torch.float32)
    out = {"fp32": (scores.logp.float(), engine)}
    if not bf16:
        return out, scores.mask
    with torch.no_grad():
        ids, attn, position_ids, mask, T, t, _ = _prepare(model, prompts, comps, temps, pad)
        ref = model(input_ids=ids, attention_mask=attn, position_ids=position_ids, use_cache=False).logits
        half = low(input_ids=ids, attention_mask=attn, position_ids=position_ids, use_cache=False).logits
    target = ids[:, -T:].unsqueeze(-1)

    def logp(logits: torch.Tensor, scale: float, dtype) -> torch.Tensor:
        scaled = (logits.float() * scale).to(dtype).float()[:, -(T + 1) : -1] / t.view(-1, 1, 1)
        return torch.log_softmax(scaled, dim=-1).gather(-1, target).squeeze(-1)

    for s in SCALES:
        out[f"bf16 logits x{s:g}"] = (logp(ref, s, torch.float32), logp(ref, s, torch.bfloat16))
    out["bf16 forward"] = (logp(ref, 1.0, torch.float32), logp(half, 1.0, torch.bfloat16))
    return out, scores.mask


def measure(args) -> dict:
    tolerance = TrustConfig().verify_tolerance
    per_run = -(-args.groups // (len(SEEDS) * len(TEMPERATURES)))
    limits = {"median_abs": tolerance, "mean": tolerance, "mean_abs": tolerance, "sequence": tolerance}
    honest: dict[str, dict] = defaultdict(
        lambda: {
            "groups": 0,
            "false_positives": 0,
            "reasons": Counter(),
            "tokens": 0,
            "abs_sum": 0.0,
            "abs_max": 0.0,
            "over_p99": [],
            "margin": Counter(),
            "off_tokens_max": 0,
            "kl_max": 0.0,
        }
    )
    lies: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    done = 0
    for seed in SEEDS:
        for temperature in TEMPERATURES:
            groups, engine = sample(args.preset, seed, temperature, per_run)
            model, pad = engine.model, engine.tokenizer.pad_token_id
            low = copy.deepcopy(model).to(torch.bfloat16)
            for start in range(0, len(groups), BATCH):
                batch = groups[start : start + BATCH]
                variants, mask = claims(model, low, batch, pad, (start // BATCH) % args.bf16_every == 0)
                offsets = [sum(len(g.completions) for g in batch[:k]) for k in range(len(batch))]
                for name, (ref, claim) in variants.items():
                    h = honest[name]
                    delta = (claim - ref).abs()[mask]
                    h["tokens"] += int(delta.numel())
                    h["abs_sum"] += float(delta.sum())
                    h["abs_max"] = max(h["abs_max"], float(delta.max()))
                    h["over_p99"].append(float(torch.quantile(delta, 0.99)))
                    for k, g in enumerate(batch):
                        rows = slice(offsets[k], offsets[k] + len(g.completions))
                        m = group_mismatch(ref[rows], claim[rows], mask[rows], tolerance)
                        h["groups"] += 1
                        h["false_positives"] += not m.passed
                        if not m.passed:
                            h["reasons"][m.reason] += 1
                        for stat, limit in limits.items():
                            h["margin"][stat] = max(h["margin"][stat], abs(getattr(m, stat)) / limit)
                        h["off_tokens_max"] = max(h["off_tokens_max"], m.off_tokens)
                        h["kl_max"] = max(h["kl_max"], m.kl)
                        if name in LIE_ON and (start + k) % args.lie_every == 0:
                            true = [claim[offsets[k] + i, : len(c)].tolist() for i, c in enumerate(g.completions)]
                            for kind in family():
                                told = lie(kind, true, g.rewards, seed=start + k)
                                lied = claim[rows].clone()
                                for i, lp in enumerate(told):
                                    lied[i, : len(lp)] = torch.tensor(lp)
                                got = group_mismatch(ref[rows], lied, mask[rows], tolerance)
                                lies[name][kind]["groups"] += 1
                                lies[name][kind]["caught"] += not got.passed
                                lies[name][kind][got.reason or "passed"] += 1
            done += len(groups)
            print(
                f"seed {seed} temperature {temperature}: {done} groups, load {os.getloadavg()[0]:.1f}",
                file=sys.stderr,
                flush=True,
            )
    table = {}
    for name, h in honest.items():
        p99 = sorted(h["over_p99"])
        table[name] = {
            "groups": h["groups"],
            "false_positives": h["false_positives"],
            "false_positive_reasons": dict(h["reasons"]),
            "token_abs_delta_mean": round(h["abs_sum"] / max(1, h["tokens"]), 5),
            "token_abs_delta_p99_median_batch": round(p99[len(p99) // 2], 5),
            "token_abs_delta_max": round(h["abs_max"], 4),
            "off_tokens_max": h["off_tokens_max"],
            "largest_share_of_limit": {k: round(v, 3) for k, v in h["margin"].items()},
            "kl_max": round(h["kl_max"], 6),
        }
    caught = {
        name: {
            kind: {
                "groups": c["groups"],
                "caught": c["caught"],
                "by": {k: v for k, v in c.items() if k not in ("groups", "caught")},
            }
            for kind, c in kinds.items()
        }
        for name, kinds in lies.items()
    }
    return {
        "preset": args.preset,
        "tolerance": tolerance,
        "off_token_nats": OFF_TOKEN * tolerance,
        "seeds": SEEDS,
        "temperatures": TEMPERATURES,
        "honest": table,
        "lies": caught,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny-cpu")
    ap.add_argument("--groups", type=int, default=10_240, help="honest groups in all (split over seeds x temps)")
    ap.add_argument("--lie-every", type=int, default=10, help="lie on every n-th honest group")
    ap.add_argument("--bf16-every", type=int, default=4, help="bf16-like claims for every n-th batch of groups")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    began = time.time()
    load = os.getloadavg()
    report = {
        **measure(args),
        "load_avg_start": load,
        "load_avg_end": os.getloadavg(),
        "seconds": round(time.time() - began, 1),
        "command": " ".join(sys.argv),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
