"""GEPO, GSPO and GRPO policy losses with defensive sampling, the learner-sampler KL and diagnostics.

The maths follows the GEPO paper (Group Expectation Policy Optimization, HeteroRL), computed in log space:
sequence log-probs are length-normalised means, group expectations are log-sum-exps, and padded positions are
zeroed *before* any exp so that neither the value nor the gradient can become NaN whatever the completion length.

Choices where the paper leaves room (or where this code departs from it):
- The loss family is `importance_sampling_level` (token = GRPO, sequence = GSPO, group = GEPO); `loss_type` is
  TRL's token aggregation, applied to every family (a sequence weight counts once per token of its sequence):
  grpo = token mean per sequence, then the mean over sequences (for sequence-level weights: the plain mean, as
  the GEPO and GSPO papers take); bnpo and dapo = mean over every completion token of the call (TRL's dapo
  normalises by the tokens of the whole accumulated batch: the same when gradient_accumulation_steps is 1);
  dr_grpo = sum / (rows * max_completion_length), a constant normaliser as in TRL and Dr. GRPO (the learner
  passes `sampler.max_completion_length`; a direct call without it uses the call's padded width).
- `epsilon`/`epsilon_high` are TRL's: 0.2, and epsilon_high unset = epsilon, for every family (GSPO's own paper
  uses 3e-4/4e-4; the HeteroRL comparison ran GSPO at 0.2/0.2).
- `scale_rewards` is TRL's: group (std of the group, n-1), batch (std of every reward of the call, zero-signal
  groups included), none; True/False = group/none; one setting for every family (default none: the GEPO
  authors' online runs divided by no std). The learner computes advantages once per step
  (`learner.step_stats`).
- Defensive sampling applies to gepo only. `gepo_defensive_schedule: staleness` uses lam_i = 1 - (1 - lam)^tau_i
  (0 on-policy, towards 1 = plain policy gradient as samples age); the default lam is 0 (plain GEPO): the
  latency sweep (bench/latency-tolerance/latency_sweep.py) found lam 0.5 / 0.8 no better at any delay on the
  built-in task.
- `gepo_group_scope: microbatch` takes E_q[q] over the GEPO authors' micro-batches: the rows shuffled (seeded)
  and cut into sets of `gepo_microbatch_rows` (8) rows from mixed prompts; advantages stay per prompt group.
- `cppo_beta` is HeteroRL's learner-sampler KL penalty (CPPO-KL): per token k3 = exp(lq - lp) - (lq - lp) - 1
  with gradient through lp, added to the per-token loss before the `loss_type` aggregation (as TRL adds its
  `beta` term). Beyond lq - lp = KL_LINEAR_FROM nats it continues linearly (same value and slope there), so it
  stays finite and keeps pulling the learner back where it has fallen furthest below the sampler. It is zero
  on-policy. `beta` is TRL's: the same k3 per token to a frozen reference model (the learner's starting
  weights; under LoRA the base without adapters), added the same way; the caller passes its log-probs.
- Zero-signal groups get A = 0 here and stay in the mean; the learner loop skips them before the forward pass,
  so in training they are counted and skipped.
- Diagnostics: `is_weight_var` is each family's own weights' population variance over sequences (token level:
  of each non-empty sequence's mean token weight; ~0 for GRPO/GSPO on-policy by construction);
  `ratio_peqq_var` is the paper's statistic, the same for every family (see `ratio_peqq_variance`); `kl` is
  KL(q || p) per token, unbiased on samples from q (see `sampler_kl`); `entropy` is the sampling policy's
  per-token entropy at the sampling temperature, estimated as the mean of -log q over the sampled tokens (as the
  authors' `sampler_entropy`); clip fraction counts weights whose clipped branch is the minimum (no gradient).
"""

from __future__ import annotations

import math

import torch

from swarmnode.config import LearnerConfig
from swarmnode.learner.corrections import apply_factor, corrections, delta_cap, gepo_plus_rows
from swarmnode.learner.loss_stats import (  # re-exported: the paper's statistic and the KL diagnostic live there
    PAPER_MICROBATCH_ROWS as PAPER_MICROBATCH_ROWS,
)
from swarmnode.learner.loss_stats import ratio_peqq_variance as ratio_peqq_variance
from swarmnode.learner.loss_stats import ratio_peqq_variance_tensor, sampler_kl, staleness_stats
from swarmnode.learner.step_totals import counted
from swarmnode.model.transfers import readback, to_device

ALGORITHMS = ("gepo", "gspo", "grpo")  # the loss families (LearnerConfig.algorithm)
ADV_EPS = 1e-4  # A = (r - mean) / (std + 1e-4), as TRL
KL_LINEAR_FROM = 10.0  # the CPPO-KL penalty is linear in lq - lp beyond this (slope e^10 - 1 ~ 2.2e4 per token)


def clip_range(cfg: LearnerConfig) -> tuple[float, float]:
    """(eps_low, eps_high): epsilon, and epsilon_high (unset = epsilon), as TRL."""
    return cfg.epsilon, cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high


def _group_ids(group_index: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense ids 0..n-1 for arbitrary group labels, and n."""
    uniq, inverse = torch.unique(group_index, return_inverse=True)
    return inverse, int(uniq.numel())


def _group_sum(x: torch.Tensor, inv: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=x.dtype, device=x.device).index_add_(0, inv, x)


def _group_logsumexp(x: torch.Tensor, inv: torch.Tensor, n: int) -> torch.Tensor:
    """logsumexp of `x` within each group, returned per group (no gradient needed by callers)."""
    peak = torch.full((n,), -math.inf, dtype=x.dtype, device=x.device).scatter_reduce(0, inv, x, "amax")
    return peak + torch.log(_group_sum(torch.exp(x - peak[inv]), inv, n))


def advantages(
    rewards: torch.Tensor, group_index: torch.Tensor, scale: str | bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row group-relative advantages, and a per-group flag of zero signal (all rewards equal).

    `scale` (TRL's scale_rewards): "group" divides by the group's sample std (n-1) + 1e-4, "batch" by the std
    of all rewards given + 1e-4, "none" not at all (True/False = group/none). A group of one carries no signal.
    """
    scale = {True: "group", False: "none"}.get(scale, scale) if isinstance(scale, bool) else scale
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards {scale!r}: expected group, batch or none")
    inv, n = _group_ids(group_index)
    count = _group_sum(torch.ones_like(rewards), inv, n)
    mean = _group_sum(rewards, inv, n) / count
    centred = rewards - mean[inv]
    sq = _group_sum(centred * centred, inv, n)
    zero = (sq <= 1e-12) | (count < 2)
    adv = torch.where(zero[inv], torch.zeros_like(centred), centred)
    if scale == "group":
        std = torch.sqrt(sq / (count - 1).clamp(min=1))
        adv = adv / (std[inv] + ADV_EPS)
    elif scale == "batch":
        adv = adv / ((rewards.std() if rewards.numel() > 1 else torch.zeros_like(rewards[0])) + ADV_EPS)
    return adv, zero


def defensive_lambdas(cfg: LearnerConfig, staleness: torch.Tensor | None, rows: int, device) -> torch.Tensor:
    """Per-row lambda. `fixed`: cfg.gepo_defensive_lambda everywhere. `staleness`: 1 - (1 - lambda)^tau, i.e. 0
    on-policy and growing towards 1 (plain policy gradient) as the sample gets staler."""
    lam = torch.full((rows,), float(cfg.gepo_defensive_lambda), dtype=torch.float64, device=device)
    if cfg.gepo_defensive_schedule == "staleness":
        if staleness is None:
            raise ValueError("gepo_defensive_schedule=staleness needs the per-row staleness")
        lam = 1.0 - (1.0 - lam) ** to_device(staleness.to(torch.float64), device).clamp(min=0)
    return lam


def _masked(logp: torch.Tensor, logq: torch.Tensor, mask: torch.Tensor):
    """Token log-probs zeroed on padding (before any exp), lengths L_i = max(1, |y_i|), and LP_i, LQ_i."""
    if logp.shape != logq.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp/logq/mask must share one [B, T] shape, got {tuple(logp.shape)}, "
            f"{tuple(logq.shape)}, {tuple(mask.shape)}"
        )
    dtype = logp.dtype if logp.dtype == torch.float64 else torch.float32
    m = mask.to(torch.bool)
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    lp_tok = torch.where(m, logp.to(dtype), zero)
    lq_tok = torch.where(m, logq.to(device=logp.device, dtype=dtype).detach(), zero)
    lengths = m.sum(dim=1).clamp(min=1).to(dtype)
    return lp_tok, lq_tok, m, lengths, lp_tok.sum(dim=1) / lengths, lq_tok.sum(dim=1) / lengths


def log_importance_weights(
    algorithm: str,
    logp: torch.Tensor,
    logq: torch.Tensor,
    mask: torch.Tensor,
    group_index: torch.Tensor,
    cfg: LearnerConfig,
    staleness: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log importance weights: [B, T] for grpo (0 on padding), [B] for gspo and gepo."""
    lp_tok, lq_tok, _, lengths, LP, LQ = _masked(logp, logq, mask)
    return _log_weights(algorithm, lp_tok, lq_tok, LP, LQ, lengths, group_index, cfg, staleness)


def microbatch_scope(rows: int, size: int, seed: int) -> torch.Tensor:
    """Per row, the index of its set in a seeded shuffle of the rows cut into sets of `size` (the GEPO authors'
    micro-batches; the last set takes the remainder)."""
    perm = torch.randperm(rows, generator=torch.Generator().manual_seed(int(seed)))
    scope = torch.empty(rows, dtype=torch.long)
    scope[perm] = torch.arange(rows) // size
    return scope


def expectation_scope(group_index: torch.Tensor, cfg: LearnerConfig, seed: int = 0) -> torch.Tensor:
    """Per row, the set over which GEPO's E_q[q] is taken: its prompt's group (`gepo_group_scope: prompt`) or
    its shuffled micro-batch of `gepo_microbatch_rows` rows (`microbatch`, seeded by `seed`)."""
    if cfg.gepo_group_scope == "microbatch":
        return microbatch_scope(group_index.shape[0], cfg.gepo_microbatch_rows, seed).to(group_index.device)
    return group_index


def group_log_expectation(LQ: torch.Tensor, scope: torch.Tensor) -> torch.Tensor:
    """Per row, GEPO's log E_q[q] = logsumexp(2 LQ) - logsumexp(LQ) over the rows of its scope (labels, one per
    row: see `expectation_scope`). Sampler data only: no gradient."""
    inv, n = _group_ids(scope.to(LQ.device))
    with torch.no_grad():
        LQ = LQ.detach()
        return (_group_logsumexp(2 * LQ, inv, n) - _group_logsumexp(LQ, inv, n))[inv]


def _log_weights(algorithm, lp_tok, lq_tok, LP, LQ, lengths, group_index, cfg, staleness, log_e=None):
    if algorithm == "grpo":
        return lp_tok - lq_tok
    if algorithm == "gspo":
        return LP - LQ
    if algorithm != "gepo":
        raise ValueError(f"algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    if log_e is None:
        log_e = group_log_expectation(LQ, expectation_scope(group_index, cfg))
    log_den = log_e.to(device=LP.device, dtype=LP.dtype)
    if cfg.gepo_defensive_lambda != 0 or cfg.gepo_defensive_schedule != "fixed":
        lam = defensive_lambdas(cfg, staleness, LP.shape[0], LP.device).to(LP.dtype)
        # log(lam * sg(p) + (1 - lam) * E_q[q]); log(0) = -inf is exact at lam = 0 or 1.
        log_den = torch.logaddexp(torch.log(lam) + LP.detach(), torch.log1p(-lam) + log_den)
    if cfg.gepo_plus:  # the authors' gepo+: near-on-policy sequences take GSPO's own denominator q_i
        log_den = torch.where(gepo_plus_rows(lp_tok, lq_tok, lengths, cfg.gepo_plus_kl_threshold), LQ, log_den)
    return LP - log_den


def _aggregate_tokens(
    per_tok: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, mode: str, max_length: int | None = None
) -> torch.Tensor:
    """TRL's token aggregation of a [B, T] per-token loss that is zero on padding (see the module docstring);
    `max_length` is dr_grpo's constant (None: the padded width T)."""
    if mode in ("bnpo", "dapo"):
        return per_tok.sum() / mask.sum().clamp(min=1)
    if mode == "dr_grpo":
        return per_tok.sum() / (per_tok.shape[0] * (per_tok.shape[1] if max_length is None else max_length))
    return (per_tok.sum(dim=1) / lengths).mean()


def cppo_kl_penalty(lp_tok: torch.Tensor, lq_tok: torch.Tensor) -> torch.Tensor:
    """Per token, HeteroRL's k3 penalty exp(d) - d - 1 with d = lq - lp (gradient through lp), continued linearly
    beyond d = KL_LINEAR_FROM (value and slope match there): finite, and its gradient never vanishes. Zero where
    lp = lq (padding)."""
    d = lq_tok - lp_tok
    near = d.clamp(max=KL_LINEAR_FROM)
    return torch.expm1(near) - near + (d - near) * math.expm1(KL_LINEAR_FROM)


def _kl_penalties(
    lp_tok: torch.Tensor,
    lq_tok: torch.Tensor,
    m: torch.Tensor,
    ref_logp: torch.Tensor | None,
    cfg: LearnerConfig,
    w: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The per-token KL terms added to the loss before aggregation: cppo_beta x k3 to the sampler, beta x k3 to
    the frozen reference model (TRL's; times the importance weight `w` with `use_bias_correction_kl`); None when
    both are off."""
    terms = []
    if cfg.cppo_beta > 0:
        terms.append(cfg.cppo_beta * cppo_kl_penalty(lp_tok, lq_tok))
    if cfg.beta > 0:
        if ref_logp is None:
            raise ValueError("learner.beta > 0 needs the reference model's log-probs (ref_logp)")
        ref_tok = torch.where(
            m,
            ref_logp.to(device=lp_tok.device, dtype=lp_tok.dtype).detach(),
            torch.zeros((), dtype=lp_tok.dtype, device=lp_tok.device),
        )
        kl = cppo_kl_penalty(lp_tok, ref_tok)
        if cfg.use_bias_correction_kl and w is not None:  # TRL: per_token_kl * coef_1 (with its gradient)
            kl = kl * (w if w.dim() == 2 else w[:, None])
        terms.append(cfg.beta * kl)
    return sum(terms[1:], terms[0]) if terms else None


def policy_loss(
    algorithm: str | None,
    logp: torch.Tensor,
    logq: torch.Tensor,
    mask: torch.Tensor,
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    cfg: LearnerConfig,
    staleness: torch.Tensor | None = None,
    shuffle_seed: int = 0,
    adv: torch.Tensor | None = None,
    log_e: torch.Tensor | None = None,
    lazy: bool = False,
    max_completion_length: int | None = None,
    ref_logp: torch.Tensor | None = None,
    truncated: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float | torch.Tensor]]:
    """The clipped surrogate loss of `algorithm` (gepo|gspo|grpo; None = cfg.algorithm) and its diagnostics.

    logp [B,T] learner log-probs (with grad); logq [B,T] behaviour log-probs; mask [B,T] completion mask;
    rewards [B]; group_index [B] the prompt group of each row; staleness [B] optional, in versions;
    shuffle_seed seeds the row shuffle of the paper's variance statistic (and of `gepo_group_scope: microbatch`).
    Diagnostics are python floats. `max_completion_length` is dr_grpo's constant normaliser (None: the padded
    width of logp). `ref_logp` [B,T]: the frozen reference model's log-probs, needed when `cfg.beta` > 0.
    `truncated` [B] bool: completions cut at the length limit (`mask_truncated_completions`). The off-policy
    corrections (`learner.corrections`) multiply the surrogate; every mean comes with its count
    (`learner.step_totals`), so micro-batch figures merge into the step's exactly.
    Rows of zero-signal groups get A = 0 (the caller may also skip them before the forward pass).
    `adv` [B] and `log_e` [B] (GEPO's log E_q[q]), when given, replace what would be computed from these rows:
    the learner computes them over whole groups and then splits rows into micro-batches freely.
    With `lazy`, diagnostics computed on the device stay scalar tensors there (`transfers.readback` turns them
    into these floats), so that a step reads them back in one transfer.
    """
    algorithm = algorithm or cfg.algorithm
    if algorithm not in ALGORITHMS:
        raise ValueError(f"loss family {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    lp_tok, lq_tok, m, lengths, LP, LQ = _masked(logp, logq, mask)
    rows, dtype = logp.shape[0], LP.dtype
    if rewards.shape != (rows,) or group_index.shape != (rows,):
        raise ValueError(f"rewards and group_index must have shape [{rows}]")
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    group_index = group_index.to(logp.device)
    rewards = rewards.to(device=logp.device, dtype=dtype)
    if adv is None:
        adv, zero_groups = advantages(rewards, group_index, cfg.scale_rewards)
    else:
        adv = adv.to(device=logp.device, dtype=dtype)
        zero_groups = adv == 0  # per row: the caller's groups may not all be here

    eps_low, eps_high = clip_range(cfg)
    if log_e is None and algorithm == "gepo":
        log_e = group_log_expectation(LQ, expectation_scope(group_index, cfg, shuffle_seed))
    logw = _log_weights(algorithm, lp_tok, lq_tok, LP, LQ, lengths, group_index, cfg, staleness, log_e)
    w = torch.exp(logw)
    a = adv[:, None] if algorithm == "grpo" else adv
    clipped = torch.clamp(w, 1 - eps_low, 1 + eps_high)
    surrogate = -torch.minimum(delta_cap(w, cfg) * a, clipped * a)
    binds = (w * a) > (clipped * a)  # the clipped branch is the min: no gradient flows
    fixes = corrections(lp_tok, lq_tok, m, lengths, adv, cfg, truncated)
    if fixes.factor is not None and fixes.factor.dim() == 2:  # token-mode figures are taken over tokens
        counts_is = dict.fromkeys(
            ("is_masked_fraction", "is_truncated_fraction", "importance_sampling_ratio_mean", "masked_fraction"), 1
        )
    else:
        counts_is = {}
    surrogate = apply_factor(surrogate, fixes.factor)  # [B, T] where a factor is per token
    penalty = _kl_penalties(lp_tok, lq_tok, m, ref_logp, cfg, w)

    def aggregate(per_tok: torch.Tensor) -> torch.Tensor:
        return _aggregate_tokens(per_tok, m, lengths, cfg.loss_type, max_completion_length)

    tokens = m.sum().clamp(min=1)
    counts_is = {k: tokens for k in counts_is}
    counts_is["sampling_logp_difference_mean"] = tokens
    if algorithm == "grpo":
        nonempty = m.any(dim=1)  # an empty completion has no mean token weight
        seq_w = (torch.where(m, w, zero).sum(dim=1) / lengths)[nonempty] if nonempty.any() else torch.ones(1)
        clip_frac = (binds & m).sum() / tokens
        counts = {"clip_fraction": tokens, "is_weight": nonempty.sum(), "delta_clipped_fraction": tokens}
    else:
        seq_w = w
        clip_frac = binds.to(dtype).mean()
        counts = {}
    counts.update(counts_is)
    per_tok = torch.where(m, surrogate if surrogate.dim() == 2 else surrogate[:, None], zero)
    if surrogate.dim() == 1 and cfg.loss_type == "grpo":  # token mean of a constant per sequence: the plain mean
        pg_loss = surrogate.mean()
        loss = pg_loss if penalty is None else pg_loss + aggregate(penalty)
    else:
        pg_loss = aggregate(per_tok)
        loss = pg_loss if penalty is None else aggregate(per_tok + penalty)
    kl_seq = sampler_kl(lp_tok, lq_tok).sum(dim=1) / lengths

    with torch.no_grad():
        sw = seq_w.detach()
        diag = {
            "loss": loss.detach(),
            "pg_loss": pg_loss.detach(),
            "kl": kl_seq.mean(),
            "entropy": -lq_tok.sum() / tokens,
            "is_weight_mean": sw.mean(),
            "is_weight_var": sw.var(unbiased=False),
            "is_weight_max": sw.max(),
            "ratio_peqq_var": ratio_peqq_variance_tensor(LP, LQ, shuffle_seed),
            "clip_fraction": clip_frac,
            "reward_mean": rewards.mean(),
            "reward_std": rewards.std(unbiased=False),
            "zero_signal_fraction": zero_groups.to(dtype).mean(),
            "advantage_abs_mean": adv.abs().mean(),
            "completion_length_mean": m.sum(dim=1).to(dtype).mean(),
            **fixes.diag,
            **_extra_diagnostics(w, adv, m, lp_tok, lq_tok, lengths, algorithm, cfg),
        }
        if ref_logp is not None and cfg.beta > 0:
            ref_tok = torch.where(m, ref_logp.to(device=logp.device, dtype=dtype), zero)
            diag["ref_kl"] = cppo_kl_penalty(lp_tok.detach(), ref_tok).sum() / tokens
            counts["ref_kl"] = tokens
        if staleness is not None:
            diag.update(staleness_stats(staleness, kl_seq.detach()))
        diag.update(counted(diag, rows, tokens, counts))
    return loss, (diag if lazy else readback(diag))


def _extra_diagnostics(w, adv, m, lp_tok, lq_tok, lengths, algorithm, cfg: LearnerConfig) -> dict:
    """The share of weights `delta` caps where it changes the loss (A < 0), and gepo+'s share of rows on GSPO's
    denominator (only when those options are on)."""
    out: dict = {}
    if cfg.delta is not None:
        if w.dim() == 2:  # token level: over completion tokens
            capped = (w.detach() > cfg.delta) & (adv[:, None] < 0) & m
            out["delta_clipped_fraction"] = capped.sum() / m.sum().clamp(min=1)
        else:
            out["delta_clipped_fraction"] = ((w.detach() > cfg.delta) & (adv < 0)).to(w.dtype).mean()
    if cfg.gepo_plus and algorithm == "gepo":
        out["gepo_plus_fraction"] = gepo_plus_rows(lp_tok, lq_tok, lengths, cfg.gepo_plus_kl_threshold).double().mean()
    return out
