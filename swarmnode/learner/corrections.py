"""Off-policy corrections of the surrogate loss, with TRL's names and semantics (trl/trainer/grpo_trainer.py):
INTELLECT-2's two-sided clip `delta`, the sampler-mismatch importance-sampling correction
(`vllm_importance_sampling_*`), DeepSeek-V3.2's off-policy sequence mask (`off_policy_mask_threshold`), DAPO's
`mask_truncated_completions`, and the GEPO authors' `gepo+` (GSPO's denominator for near-on-policy sequences).

The learner's behaviour log-probs lq are the sampler's own (its engine's numerics and its staleness together), so
the surrogate's weight w already carries the ratio p/q; TRL instead recomputes pi_old with the training forward
and multiplies its loss by the engine ratio pi_old/q. Here the correction is therefore a factor on the loss:
- `*_mask`: 0 where the ratio rho is outside [clip_min, clip_max], else 1 (the same rows/tokens TRL masks);
- `*_truncate`: clamp(rho, clip_min, clip_max) / rho (the effective weight w x factor is TRL's truncated ratio
  when w is rho itself, i.e. at token level).
`sequence_*` modes take rho_i = exp(sum_t m (lp - lq)) (TRL's sum, not the length-normalised mean), `token_*`
rho_it = exp(lp_t - lq_t). Everything here is detached: the factors scale the gradient, they carry none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from swarmnode.config import LearnerConfig

LOG_RATIO_CAP = 80.0  # sequence log-ratios are clamped here before exp (exp(80) is finite in float32)


@dataclass
class Corrections:
    """The loss factor of each row ([B]) or token ([B, T]), or None when nothing applies, and its diagnostics."""

    factor: torch.Tensor | None
    diag: dict[str, torch.Tensor | float] = field(default_factory=dict)


def is_ratio(lp_tok: torch.Tensor, lq_tok: torch.Tensor, m: torch.Tensor, mode: str) -> torch.Tensor:
    """TRL's importance-sampling ratio: per sequence exp(sum_t m (lp - lq)) for `sequence_*`, per token for
    `token_*` (1 on padding); detached."""
    diff = torch.where(m, lp_tok.detach() - lq_tok, torch.zeros((), dtype=lp_tok.dtype, device=lp_tok.device))
    if mode.startswith("sequence"):
        return torch.exp(diff.sum(dim=1).clamp(-LOG_RATIO_CAP, LOG_RATIO_CAP))
    return torch.exp(diff.clamp(-LOG_RATIO_CAP, LOG_RATIO_CAP))


def is_factor(rho: torch.Tensor, mode: str, clip_min: float | None, clip_max: float | None) -> torch.Tensor:
    """The loss factor of `rho` under `mode`: 1/0 inside/outside [clip_min, clip_max] (`*_mask`), or
    clamp(rho, clip_min, clip_max) / rho (`*_truncate`; an unset bound is no bound, as torch.clamp)."""
    if mode.endswith("mask"):
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        return ((rho >= low) & (rho <= high)).to(rho.dtype)
    return torch.clamp(rho, min=clip_min, max=clip_max) / rho


def off_policy_keep(
    lp_tok: torch.Tensor, lq_tok: torch.Tensor, lengths: torch.Tensor, adv: torch.Tensor, threshold: float
) -> torch.Tensor:
    """TRL's `get_off_policy_mask`: per row 1 where A >= 0 or the mean per-token lq - lp is at most `threshold`,
    else 0 (padding is zero in both log-prob tensors)."""
    kl = (lq_tok - lp_tok.detach()).sum(dim=1) / lengths
    return ((adv >= 0) | (kl <= threshold)).to(lp_tok.dtype)


def gepo_plus_rows(lp_tok: torch.Tensor, lq_tok: torch.Tensor, lengths: torch.Tensor, threshold: float):
    """gepo+: per row, True where the sequence's learner-sampler KL (the token mean of the unbiased KL(q||p)
    estimate (r - 1) - log r, r = p/q) is below `threshold`: those rows take GSPO's denominator q_i."""
    d = (lp_tok.detach() - lq_tok).clamp(max=20.0)
    return ((torch.expm1(d) - d).sum(dim=1) / lengths) < threshold


def delta_cap(w: torch.Tensor, cfg: LearnerConfig) -> torch.Tensor:
    """INTELLECT-2's two-sided clip as TRL: the unclipped branch's weight capped at `delta` (no gradient above it)."""
    return w if cfg.delta is None else torch.clamp(w, max=cfg.delta)


def corrections(
    lp_tok: torch.Tensor,
    lq_tok: torch.Tensor,
    m: torch.Tensor,
    lengths: torch.Tensor,
    adv: torch.Tensor,
    cfg: LearnerConfig,
    truncated: torch.Tensor | None = None,
) -> Corrections:
    """The product of the configured loss factors (IS correction, off-policy mask, truncated completions) and
    their diagnostics: `is_masked_fraction` (rows or tokens whose factor is 0) or `is_truncated_fraction`
    (factor != 1), `importance_sampling_ratio_min/mean/max` (TRL's figures: the corrected ratio rho x factor),
    `sampling_logp_difference_mean/max` (|lp - lq| per token), `off_policy_masked_fraction`,
    `truncated_masked_fraction`, and `masked_fraction` (every factor together: rows, or tokens, whose factor is 0)."""
    factor: torch.Tensor | None = None
    diag: dict[str, torch.Tensor | float] = {}
    with torch.no_grad():
        if cfg.vllm_importance_sampling_correction:
            mode = cfg.vllm_importance_sampling_mode
            rho = is_ratio(lp_tok, lq_tok, m, mode)
            f = is_factor(rho, mode, cfg.vllm_importance_sampling_clip_min, cfg.vllm_importance_sampling_clip_max)
            counted = torch.ones_like(f, dtype=torch.bool) if f.dim() == 1 else m
            n = counted.sum().clamp(min=1)
            shown = (rho * f)[counted] if counted.any() else torch.ones(1, dtype=rho.dtype, device=rho.device)
            if mode.endswith("mask"):
                diag["is_masked_fraction"] = ((f == 0) & counted).sum() / n
            else:
                diag["is_truncated_fraction"] = ((f != 1) & counted).sum() / n
            diag["importance_sampling_ratio_min"] = shown.min()
            diag["importance_sampling_ratio_mean"] = shown.mean()
            diag["importance_sampling_ratio_max"] = shown.max()
            gap = (lp_tok.detach() - lq_tok).abs()[m]
            diag["sampling_logp_difference_mean"] = gap.mean() if gap.numel() else 0.0
            diag["sampling_logp_difference_max"] = gap.max() if gap.numel() else 0.0
            factor = f
        if cfg.off_policy_mask_threshold is not None:
            keep = off_policy_keep(lp_tok, lq_tok, lengths, adv, cfg.off_policy_mask_threshold)
            diag["off_policy_masked_fraction"] = 1 - keep.mean()
            factor = _times(factor, keep)
        if cfg.mask_truncated_completions and truncated is not None:
            keep = (~truncated.to(device=lp_tok.device, dtype=torch.bool)).to(lp_tok.dtype)
            diag["truncated_masked_fraction"] = 1 - keep.mean()
            factor = _times(factor, keep)
        if factor is not None:  # every correction together: the share of rows (tokens) that count in no loss term
            counted = torch.ones_like(factor, dtype=torch.bool) if factor.dim() == 1 else m
            diag["masked_fraction"] = ((factor == 0) & counted).sum() / counted.sum().clamp(min=1)
    return Corrections(factor, diag)


def _times(factor: torch.Tensor | None, row_factor: torch.Tensor) -> torch.Tensor:
    """`factor` (None, [B] or [B, T]) times a per-row factor [B]."""
    if factor is None:
        return row_factor
    return factor * (row_factor if factor.dim() == 1 else row_factor[:, None])


def apply_factor(surrogate: torch.Tensor, factor: torch.Tensor | None) -> torch.Tensor:
    """`surrogate` ([B] sequence-level or [B, T] token-level) times `factor` ([B] or [B, T]); the result is
    [B, T] when either is."""
    if factor is None:
        return surrogate
    if surrogate.dim() == factor.dim():
        return surrogate * factor
    return surrogate[:, None] * factor if surrogate.dim() == 1 else surrogate * factor[:, None]
