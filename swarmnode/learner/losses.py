"""GEPO, GSPO and GRPO policy losses with defensive sampling, the learner-sampler KL and diagnostics.

The maths is /work/shared/GEPO.md, computed in log space throughout: sequence log-probs are length-normalised
means, group expectations are log-sum-exps, and padded positions are zeroed *before* any exp so that neither
the value nor the gradient can become NaN whatever the completion length.

Choices where GEPO.md leaves room (or where this code departs from it):
- `epsilon`/`epsilon_high` unset take the loss type's own default: 0.2/0.2 (gepo, grpo), 3e-4/4e-4 (gspo).
- Defensive sampling applies to gepo only. `defensive_schedule: staleness` uses lam_i = 1 - (1 - lam)^tau_i
  (0 on-policy, towards 1 = plain policy gradient as samples age); the default lam is 0 (plain GEPO): the
  latency sweep (bench/latency_sweep.py) found lam 0.5 / 0.8 no better at any delay on the built-in task.
- `group_scope: microbatch` shares one E_q[q] across all rows of the call (the loop passes one
  gradient-accumulation chunk of whole groups); advantages stay per prompt group, rows are not shuffled.
- Zero-signal groups get A = 0 here and stay in the sequence mean; the learner loop skips them before the
  forward pass, so in training they are counted and skipped as GEPO.md says.
- IS-weight variance is the population variance over sequences (token level: of each non-empty sequence's
  mean token weight); clip fraction counts weights whose clipped branch is the minimum (no gradient).
"""

from __future__ import annotations

import math

import torch

from swarmnode.config import LearnerConfig
from swarmnode.health import bucket_label, bucket_of

LOSS_TYPES = ("gepo", "gspo", "grpo")
ADV_EPS = 1e-4  # GRPO/GSPO: A = (r - mean) / (std + 1e-4)
GSPO_CLIP = (3e-4, 4e-4)  # GSPO paper's (eps_low, eps_high); GEPO and GRPO use 0.2 / 0.2


def clip_range(cfg: LearnerConfig, loss_type: str | None = None) -> tuple[float, float]:
    """(eps_low, eps_high): the configured values, or the loss type's own default where unset
    (epsilon_high unset follows epsilon when that is set)."""
    default = GSPO_CLIP if (loss_type or cfg.loss_type) == "gspo" else (0.2, 0.2)
    low = cfg.epsilon if cfg.epsilon is not None else default[0]
    high = cfg.epsilon_high if cfg.epsilon_high is not None else (cfg.epsilon if cfg.epsilon is not None else default[1])
    return low, high


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


def advantages(rewards: torch.Tensor, group_index: torch.Tensor, scale: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row group-relative advantages, and a per-group flag of zero signal (all rewards equal).

    `scale` divides by the group's sample std (n-1) + 1e-4; a group of one member carries no signal.
    """
    inv, n = _group_ids(group_index)
    count = _group_sum(torch.ones_like(rewards), inv, n)
    mean = _group_sum(rewards, inv, n) / count
    centred = rewards - mean[inv]
    sq = _group_sum(centred * centred, inv, n)
    zero = (sq <= 1e-12) | (count < 2)
    adv = torch.where(zero[inv], torch.zeros_like(centred), centred)
    if scale:
        std = torch.sqrt(sq / (count - 1).clamp(min=1))
        adv = adv / (std[inv] + ADV_EPS)
    return adv, zero


def _scale_rewards(cfg: LearnerConfig, loss_type: str) -> bool:
    if cfg.scale_rewards == "auto":
        return loss_type != "gepo"
    return cfg.scale_rewards == "group"


def defensive_lambdas(cfg: LearnerConfig, staleness: torch.Tensor | None, rows: int, device) -> torch.Tensor:
    """Per-row lambda. `fixed`: cfg.defensive_lambda everywhere. `staleness`: 1 - (1 - lambda)^tau, i.e. 0
    on-policy and growing towards 1 (plain policy gradient) as the sample gets staler."""
    lam = torch.full((rows,), float(cfg.defensive_lambda), dtype=torch.float64, device=device)
    if cfg.defensive_schedule == "staleness":
        if staleness is None:
            raise ValueError("defensive_schedule=staleness needs the per-row staleness")
        lam = 1.0 - (1.0 - lam) ** staleness.to(device=device, dtype=torch.float64).clamp(min=0)
    return lam


def _masked(logp: torch.Tensor, logq: torch.Tensor, mask: torch.Tensor):
    """Token log-probs zeroed on padding (before any exp), lengths L_i = max(1, |y_i|), and LP_i, LQ_i."""
    if logp.shape != logq.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(f"logp/logq/mask must share one [B, T] shape, got {tuple(logp.shape)}, "
                         f"{tuple(logq.shape)}, {tuple(mask.shape)}")
    dtype = logp.dtype if logp.dtype == torch.float64 else torch.float32
    m = mask.to(torch.bool)
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    lp_tok = torch.where(m, logp.to(dtype), zero)
    lq_tok = torch.where(m, logq.to(device=logp.device, dtype=dtype).detach(), zero)
    lengths = m.sum(dim=1).clamp(min=1).to(dtype)
    return lp_tok, lq_tok, m, lengths, lp_tok.sum(dim=1) / lengths, lq_tok.sum(dim=1) / lengths


def log_importance_weights(
    loss_type: str,
    logp: torch.Tensor,
    logq: torch.Tensor,
    mask: torch.Tensor,
    group_index: torch.Tensor,
    cfg: LearnerConfig,
    staleness: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log importance weights: [B, T] for grpo (0 on padding), [B] for gspo and gepo."""
    lp_tok, lq_tok, _, _, LP, LQ = _masked(logp, logq, mask)
    return _log_weights(loss_type, lp_tok, lq_tok, LP, LQ, group_index, cfg, staleness)


def _log_weights(loss_type, lp_tok, lq_tok, LP, LQ, group_index, cfg, staleness):
    if loss_type == "grpo":
        return lp_tok - lq_tok
    if loss_type == "gspo":
        return LP - LQ
    if loss_type != "gepo":
        raise ValueError(f"loss_type {loss_type!r}: expected one of {', '.join(LOSS_TYPES)}")
    scope = torch.zeros_like(group_index) if cfg.group_scope == "microbatch" else group_index
    inv, n = _group_ids(scope.to(LQ.device))
    with torch.no_grad():  # log E_q[q] = logsumexp(2 LQ) - logsumexp(LQ): sampler data only
        log_e = (_group_logsumexp(2 * LQ, inv, n) - _group_logsumexp(LQ, inv, n))[inv]
    if cfg.defensive_lambda == 0 and cfg.defensive_schedule == "fixed":
        return LP - log_e
    lam = defensive_lambdas(cfg, staleness, LP.shape[0], LP.device).to(LP.dtype)
    # log(lam * sg(p) + (1 - lam) * E_q[q]); log(0) = -inf is exact at lam = 0 or 1.
    log_den = torch.logaddexp(torch.log(lam) + LP.detach(), torch.log1p(-lam) + log_e)
    return LP - log_den


def _aggregate_tokens(per_tok: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "bnpo":
        return per_tok.sum() / mask.sum().clamp(min=1)
    if mode == "dr_grpo":
        return per_tok.sum() / (per_tok.shape[0] * per_tok.shape[1])
    return (per_tok.sum(dim=1) / lengths).mean()


def _staleness_stats(staleness: torch.Tensor, kl_seq: torch.Tensor) -> dict[str, float]:
    tau = staleness.to(torch.long)
    out = {
        "staleness_min": float(tau.min()),
        "staleness_median": float(tau.float().median()),
        "staleness_max": float(tau.max()),
        "staleness_mean": float(tau.float().mean()),
    }
    buckets = torch.tensor([bucket_of(t) for t in tau.tolist()], device=kl_seq.device)  # as the health histogram
    for index in sorted(set(buckets.tolist())):
        out[f"kl_tau_{bucket_label(index)}"] = float(kl_seq[buckets == index].mean())
    return out


def policy_loss(
    loss_type: str,
    logp: torch.Tensor,
    logq: torch.Tensor,
    mask: torch.Tensor,
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    cfg: LearnerConfig,
    staleness: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate loss of `loss_type` (gepo|gspo|grpo) and its diagnostics (python floats).

    logp [B,T] learner log-probs (with grad); logq [B,T] behaviour log-probs; mask [B,T] completion mask;
    rewards [B]; group_index [B] the prompt group of each row; staleness [B] optional, in versions.
    Rows of zero-signal groups get A = 0 (the caller may also skip them before the forward pass).
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type {loss_type!r}: expected one of {', '.join(LOSS_TYPES)}")
    lp_tok, lq_tok, m, lengths, LP, LQ = _masked(logp, logq, mask)
    rows, dtype = logp.shape[0], LP.dtype
    if rewards.shape != (rows,) or group_index.shape != (rows,):
        raise ValueError(f"rewards and group_index must have shape [{rows}]")
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    group_index = group_index.to(logp.device)
    rewards = rewards.to(device=logp.device, dtype=dtype)
    adv, zero_groups = advantages(rewards, group_index, _scale_rewards(cfg, loss_type))

    eps_low, eps_high = clip_range(cfg, loss_type)
    logw = _log_weights(loss_type, lp_tok, lq_tok, LP, LQ, group_index, cfg, staleness)
    w = torch.exp(logw)
    a = adv[:, None] if loss_type == "grpo" else adv
    clipped = torch.clamp(w, 1 - eps_low, 1 + eps_high)
    surrogate = -torch.minimum(w * a, clipped * a)
    binds = (w * a) > (clipped * a)  # the clipped branch is the min: no gradient flows
    if loss_type == "grpo":
        surrogate = torch.where(m, surrogate, zero)
        pg_loss = _aggregate_tokens(surrogate, m, lengths, cfg.token_aggregation)
        nonempty = m.any(dim=1)  # an empty completion has no mean token weight
        seq_w = (torch.where(m, w, zero).sum(dim=1) / lengths)[nonempty] if nonempty.any() else torch.ones(1)
        clip_frac = (binds & m).sum() / m.sum().clamp(min=1)
    else:
        pg_loss = surrogate.mean()
        seq_w = w
        clip_frac = binds.to(dtype).mean()

    diff = lq_tok - lp_tok  # zero on padding, so k3 is zero there too
    k3 = torch.exp(diff) - diff - 1
    kl_seq = k3.sum(dim=1) / lengths
    kl = kl_seq.mean()
    loss = pg_loss + cfg.kl_coef * kl if cfg.kl_coef > 0 else pg_loss

    with torch.no_grad():
        sw = seq_w.detach()
        diag = {
            "loss": float(loss.detach()),
            "pg_loss": float(pg_loss.detach()),
            "kl": float(kl.detach()),
            "is_weight_mean": float(sw.mean()),
            "is_weight_var": float(sw.var(unbiased=False)),
            "is_weight_max": float(sw.max()),
            "clip_fraction": float(clip_frac),
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std(unbiased=False)),
            "zero_signal_fraction": float(zero_groups.to(dtype).mean()),
            "advantage_abs_mean": float(adv.abs().mean()),
            "completion_length_mean": float(m.sum(dim=1).to(dtype).mean()),
        }
        if staleness is not None:
            diag.update(_staleness_stats(staleness.to(logp.device), kl_seq.detach()))
    return loss, diag
