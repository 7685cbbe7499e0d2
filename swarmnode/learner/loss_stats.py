"""The learner's per-step statistics that are not part of the loss: the paper's importance-weight variance, the
learner-sampler KL diagnostic and the staleness figures (`learner.losses` re-exports them)."""

from __future__ import annotations

import torch

from swarmnode.model.transfers import to_device
from swarmnode.staleness import bucket_label, bucket_of

PAPER_MICROBATCH_ROWS = 8  # the GEPO authors' micro-batch: their ratio_pEqQ variance is taken over 8 rows
KL_LOG_RATIO_CAP = 20.0  # log p/q beyond this is clamped in the KL diagnostic (p/q = 5e8): finite, biased only there


def ratio_peqq_variance(LP: torch.Tensor, LQ: torch.Tensor, seed: int = 0, rows: int = PAPER_MICROBATCH_ROWS) -> float:
    """The paper's importance-weight variance, the same statistic for every loss family.

    The rows (length-normalised sequence log-probs LP_i under the learner, LQ_i under the sampler) are shuffled
    with a generator seeded by `seed` and cut into micro-batches of `rows`; in each, E_q[q] = sum q^2 / sum q
    over its rows and the unbiased variance of p_i / E_q[q] is taken; the result is the mean over micro-batches
    of at least two rows (0.0 when there is none). This is the GEPO authors' logged `ratio_pEqQ` variance.
    """
    return float(ratio_peqq_variance_tensor(LP, LQ, seed, rows))


def ratio_peqq_variance_tensor(
    LP: torch.Tensor, LQ: torch.Tensor, seed: int = 0, rows: int = PAPER_MICROBATCH_ROWS
) -> torch.Tensor:
    """`ratio_peqq_variance` as a float64 scalar tensor on LP's device (read back later, with others)."""
    LP, LQ = LP.detach().double(), LQ.detach().double()
    perm = to_device(torch.randperm(LP.shape[0], generator=torch.Generator().manual_seed(int(seed))), LP.device)
    whole = perm.shape[0] // rows * rows  # the full micro-batches at once ([k, rows]), then the rest
    parts = [perm[:whole].reshape(-1, rows)] if whole and rows >= 2 else []
    if perm.shape[0] - whole >= 2:
        parts.append(perm[whole:].reshape(1, -1))
    values = []
    for index in parts:
        lq = LQ[index]
        log_e = torch.logsumexp(2 * lq, 1, keepdim=True) - torch.logsumexp(lq, 1, keepdim=True)
        values.append(torch.exp(LP[index] - log_e).var(dim=1, unbiased=True))
    return torch.cat(values).mean() if values else torch.zeros((), dtype=torch.float64, device=LP.device)


def sampler_kl(lp_tok: torch.Tensor, lq_tok: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(q || p) on tokens sampled from q: (r - 1) - log r with r = p/q = exp(lp - lq).

    Unbiased (E_q[r] = 1 at every position) and >= 0 term by term; computed as expm1(d) - d with
    d = lp - lq clamped at +KL_LOG_RATIO_CAP, so it stays finite where p >> q. Zero where lp = lq (padding)."""
    d = (lp_tok.detach() - lq_tok).clamp(max=KL_LOG_RATIO_CAP)
    return torch.expm1(d) - d


def staleness_stats(staleness: torch.Tensor, kl_seq: torch.Tensor) -> dict[str, float | torch.Tensor]:
    """Staleness figures (from the host: the learner passes staleness there) and the mean KL per staleness bucket
    (scalar tensors on kl_seq's device: no host synchronisation)."""
    tau = staleness.to("cpu", torch.long)
    out: dict[str, float | torch.Tensor] = {
        "staleness_min": float(tau.min()),
        "staleness_median": float(tau.float().median()),
        "staleness_max": float(tau.max()),
        "staleness_mean": float(tau.float().mean()),
    }
    buckets = [bucket_of(t) for t in tau.tolist()]  # as the health histogram
    for index in sorted(set(buckets)):
        rows = to_device(torch.tensor([i for i, b in enumerate(buckets) if b == index]), kl_seq.device)
        out[f"kl_tau_{bucket_label(index)}"] = kl_seq.index_select(0, rows).mean()
        out[f"_n_kl_tau_{bucket_label(index)}"] = float(rows.numel())  # its count (`learner.step_totals`)
    return out
