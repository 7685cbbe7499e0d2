"""The off-policy corrections against independent float64 computations, and against TRL's formulas.

TRL is not a dependency: `_trl_loss` is TRL's `GRPOTrainer._compute_loss` for `loss_type="grpo"` (the IS ratio
from `_generate_and_score_completions`, `get_off_policy_mask`, the two-sided `delta` clip, `use_bias_correction_kl`),
transcribed from huggingface/trl trl/trainer/grpo_trainer.py at commit f2cd57710ae3 with its tensors' names.
"""

from __future__ import annotations

import math

import pytest
import torch

from swarmnode.config import LearnerConfig
from swarmnode.learner.losses import policy_loss

B, T = 6, 5
LENGTHS = [5, 3, 4, 1, 5, 2]


def _batch(seed: int = 0, spread: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[t < n for t in range(T)] for n in LENGTHS])
    logq = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 2 - 0.05) * mask
    logp = (logq + spread * torch.randn(B, T, generator=g, dtype=torch.float64)) * mask
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    return logp.requires_grad_(True), logq, mask, rewards, groups


def _cfg(**kw) -> LearnerConfig:
    return LearnerConfig(**kw)


def _adv(rewards, groups):
    out = []
    for i, r in enumerate(rewards.tolist()):
        mates = [float(x) for x, gi in zip(rewards, groups) if gi == groups[i]]
        out.append(r - sum(mates) / len(mates))
    return out


def _rows(logp, logq, mask):
    """Per row: (token log-probs lp, lq) over the completion, as python floats."""
    return [
        ([float(x) for x, m in zip(logp[i].detach(), mask[i]) if m], [float(x) for x, m in zip(logq[i], mask[i]) if m])
        for i in range(B)
    ]


def _ref_sequence_loss(logp, logq, mask, rewards, groups, factor_of, weight_of, eps=0.2, delta=None):
    """Plain-python GSPO/GEPO loss: mean over rows of -min(w A, clip(w) A) x factor (w capped at delta)."""
    adv = _adv(rewards, groups)
    total = 0.0
    for i, (lp, lq) in enumerate(_rows(logp, logq, mask)):
        w = weight_of(i, lp, lq)
        wd = w if delta is None else min(w, delta)
        total += -min(wd * adv[i], min(max(w, 1 - eps), 1 + eps) * adv[i]) * factor_of(i, lp, lq, adv[i])
    return total / B


def _gspo_weight(i, lp, lq):
    return math.exp(sum(lp) / len(lp) - sum(lq) / len(lq))


@pytest.mark.parametrize("mode", ["sequence_mask", "sequence_truncate"])
@pytest.mark.parametrize("bounds", [(None, 3.0), (0.5, 2.0)])
def test_sequence_is_correction_matches_a_float64_reference(mode, bounds):
    logp, logq, mask, rewards, groups = _batch(1)
    low, high = bounds
    cfg = _cfg(
        importance_sampling_level="sequence",
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_clip_min=low,
        vllm_importance_sampling_clip_max=high,
    )

    def factor(i, lp, lq, a):
        rho = math.exp(sum(lp) - sum(lq))  # TRL's sequence ratio: the sum over the completion
        lo, hi = (-math.inf if low is None else low), high
        if mode == "sequence_mask":
            return 1.0 if lo <= rho <= hi else 0.0
        return min(max(rho, 0.0 if low is None else low), high) / rho

    loss, diag = policy_loss(None, logp, logq, mask, rewards, groups, cfg)
    expected = _ref_sequence_loss(logp, logq, mask, rewards, groups, factor, _gspo_weight)
    assert float(loss) == pytest.approx(expected, rel=1e-12, abs=1e-14)
    factors = [factor(i, lp, lq, 0) for i, (lp, lq) in enumerate(_rows(logp, logq, mask))]
    key = "is_masked_fraction" if mode.endswith("mask") else "is_truncated_fraction"
    changed = sum((f == 0) if mode.endswith("mask") else (f != 1) for f in factors) / B
    assert diag[key] == pytest.approx(changed) and 0 < changed < 1  # the batch exercises both sides
    shown = [math.exp(sum(lp) - sum(lq)) * f for (lp, lq), f in zip(_rows(logp, logq, mask), factors)]
    assert diag["importance_sampling_ratio_min"] == pytest.approx(min(shown))
    assert diag["importance_sampling_ratio_max"] == pytest.approx(max(shown))
    assert diag["importance_sampling_ratio_mean"] == pytest.approx(sum(shown) / B)


def test_gepo_plus_takes_gspo_denominator_below_the_kl_threshold():
    logp, logq, mask, rewards, groups = _batch(2, spread=0.05)
    with torch.no_grad():  # rows 0 and 3 close to the sampler, the others far
        logp[[1, 2, 4, 5]] = (logq[[1, 2, 4, 5]] + 0.4) * mask[[1, 2, 4, 5]]
        logp[[0, 3]] = (logq[[0, 3]] + 0.01) * mask[[0, 3]]
    threshold = 0.002
    cfg = _cfg(importance_sampling_level="group", gepo_plus=True, gepo_plus_kl_threshold=threshold)
    rows = _rows(logp, logq, mask)

    def log_e(i):
        qs = [math.exp(sum(lq) / len(lq)) for j, (_, lq) in enumerate(rows) if groups[j] == groups[i]]
        return math.log(sum(q * q for q in qs) / sum(qs))

    def weight(i, lp, lq):
        kl = sum(math.expm1(a - b) - (a - b) for a, b in zip(lp, lq)) / len(lp)
        den = sum(lq) / len(lq) if kl < threshold else log_e(i)
        return math.exp(sum(lp) / len(lp) - den)

    loss, diag = policy_loss(None, logp, logq, mask, rewards, groups, cfg)
    expected = _ref_sequence_loss(logp, logq, mask, rewards, groups, lambda *a: 1.0, weight)
    assert float(loss) == pytest.approx(expected, rel=1e-12)
    assert diag["gepo_plus_fraction"] == pytest.approx(2 / 6)
    plain, _ = policy_loss(None, logp, logq, mask, rewards, groups, _cfg(importance_sampling_level="group"))
    assert float(plain) != pytest.approx(float(loss))  # gepo+ changed the two near-on-policy rows


def test_mask_truncated_completions_drops_their_loss_terms():
    logp, logq, mask, rewards, groups = _batch(3)
    truncated = torch.tensor([True, False, False, False, True, False])
    cfg = _cfg(importance_sampling_level="sequence", mask_truncated_completions=True)
    loss, diag = policy_loss(None, logp, logq, mask, rewards, groups, cfg, truncated=truncated)
    expected = _ref_sequence_loss(
        logp, logq, mask, rewards, groups, lambda i, *a: 0.0 if truncated[i] else 1.0, _gspo_weight
    )
    assert float(loss) == pytest.approx(expected, rel=1e-12)
    assert diag["truncated_masked_fraction"] == pytest.approx(2 / 6)


def test_defaults_change_nothing():
    logp, logq, mask, rewards, groups = _batch(4)
    for level in ("token", "sequence", "group"):
        base, _ = policy_loss(None, logp, logq, mask, rewards, groups, _cfg(importance_sampling_level=level))
        same, diag = policy_loss(
            None,
            logp,
            logq,
            mask,
            rewards,
            groups,
            _cfg(importance_sampling_level=level),
            truncated=torch.ones(B, dtype=torch.bool),
        )
        assert float(same) == float(base)
        assert not any(k.startswith(("is_masked", "importance_sampling", "off_policy", "gepo_plus")) for k in diag)


# ---- TRL parity ---------------------------------------------------------------------------------------------
def _trl_loss(per_token_logps, old_per_token_logps, sampling_per_token_logps, advantages, mask, level, args):
    """TRL's `_compute_loss` for loss_type grpo (see the module docstring), its `vllm_importance_sampling_ratio`
    from `_generate_and_score_completions` when `args["mode"]` is set."""
    advantages = advantages.unsqueeze(1)
    is_ratio = None
    if args.get("mode"):
        per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask
        if args["mode"] in ["sequence_mask", "sequence_truncate"]:
            logps_diff = per_token_logps_diff.sum(dim=-1, keepdim=True)
        else:
            logps_diff = per_token_logps_diff
        is_ratio = torch.exp(logps_diff)
        if args["mode"] in ["sequence_truncate", "token_truncate"]:
            is_ratio = torch.clamp(is_ratio, min=args.get("clip_min"), max=args.get("clip_max"))
        else:
            min_val = args["clip_min"] if args.get("clip_min") is not None else -math.inf
            max_val = args["clip_max"] if args.get("clip_max") is not None else math.inf
            is_ratio = is_ratio.masked_fill((is_ratio < min_val) | (is_ratio > max_val), value=0.0)
    if args.get("off_policy_mask_threshold") is not None:
        kl_div = sampling_per_token_logps - per_token_logps.detach()
        avg_seq_kl = (kl_div * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
        off_policy_mask = ((advantages >= 0) | (avg_seq_kl <= args["off_policy_mask_threshold"])).to(mask.dtype)
    log_ratio = per_token_logps - old_per_token_logps
    if level == "token":
        log_importance_weights = log_ratio
    else:
        log_importance_weights = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_importance_weights)
    if args.get("beta"):
        ref = args["ref"]
        per_token_kl = torch.exp(ref - per_token_logps) - (ref - per_token_logps) - 1
        if args.get("use_bias_correction_kl"):
            per_token_kl = per_token_kl * coef_1
    coef_2 = torch.clamp(coef_1, 1 - args["epsilon"], 1 + args["epsilon"])
    if args.get("delta") is not None:
        coef_1 = torch.clamp(coef_1, max=args["delta"])
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    if args.get("off_policy_mask_threshold") is not None:
        per_token_loss = per_token_loss * off_policy_mask
    if is_ratio is not None:
        per_token_loss = per_token_loss * is_ratio
    if args.get("beta"):
        per_token_loss = per_token_loss + args["beta"] * per_token_kl
    return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def _grad(loss, logp):
    (g,) = torch.autograd.grad(loss, logp)
    return g


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize(
    "extra",
    [
        dict(delta=1.3),
        dict(off_policy_mask_threshold=0.05),
        dict(delta=1.5, off_policy_mask_threshold=0.1),
        dict(beta=0.2, use_bias_correction_kl=True),
    ],
)
def test_trl_parity_with_the_sampler_as_pi_old(level, extra):
    """With pi_old = the sampler (TRL's old_per_token_logps fixed), TRL's loss and gradient are the learner's."""
    logp, logq, mask, rewards, groups = _batch(1, spread=1.2)
    adv = torch.tensor(_adv(rewards, groups), dtype=torch.float64)
    ref = (logq - 0.2) * mask
    args = dict(epsilon=0.2, ref=ref, **extra)
    trl = _trl_loss(logp, logq, logq, adv, mask.to(torch.float64), level, args)
    cfg = _cfg(importance_sampling_level=level, **extra)
    ours, diag = policy_loss(None, logp, logq, mask, rewards, groups, cfg, ref_logp=ref)
    assert float(ours) == pytest.approx(float(trl), rel=1e-10)
    assert torch.allclose(_grad(ours, logp), _grad(trl, logp), rtol=1e-9, atol=1e-12)
    if "delta" in extra:
        assert 0 < diag["delta_clipped_fraction"] < 1
    if "off_policy_mask_threshold" in extra:
        assert 0 < diag["off_policy_masked_fraction"] < 1


@pytest.mark.parametrize("mode", ["token_mask", "token_truncate", "sequence_mask"])
def test_trl_parity_of_the_is_correction_at_token_level(mode):
    """TRL's engine correction with pi_old recomputed by the training forward (= p, the first iteration) and the
    sampler's log-probs gives GRPO's gradient here: the effective weight is TRL's corrected ratio (the PPO clip
    left out of play with a wide epsilon; for sequence_mask the same rows are dropped)."""
    logp, logq, mask, rewards, groups = _batch(6, spread=0.5)
    adv = torch.tensor(_adv(rewards, groups), dtype=torch.float64)
    args = dict(epsilon=9.0, mode=mode, clip_min=0.6, clip_max=1.8)
    trl = _trl_loss(logp, logp.detach(), logq, adv, mask.to(torch.float64), "token", args)
    cfg = _cfg(
        importance_sampling_level="token",
        epsilon=9.0,
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode=mode,
        vllm_importance_sampling_clip_min=0.6,
        vllm_importance_sampling_clip_max=1.8,
    )
    ours, diag = policy_loss(None, logp, logq, mask, rewards, groups, cfg)
    g_ours, g_trl = _grad(ours, logp), _grad(trl, logp)
    if mode.startswith("token"):
        assert torch.allclose(g_ours, g_trl, rtol=1e-9, atol=1e-12)
    else:
        assert torch.equal(g_ours.abs().sum(1) == 0, g_trl.abs().sum(1) == 0)  # the same rows dropped
    assert 0 < diag["is_masked_fraction" if mode.endswith("mask") else "is_truncated_fraction"] < 1
