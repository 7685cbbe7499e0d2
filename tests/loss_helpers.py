"""An independent float64 reference of the GEPO/GSPO/GRPO losses, written from the GEPO paper's formulas with
explicit Python loops over rows, tokens and groups, in probability space (the loss tests compare the vectorised,
log-space code with it)."""

from __future__ import annotations

import math

import torch


def reference_loss(
    algorithm,
    lp,
    lq,
    mask,
    rewards,
    groups,
    *,
    eps=(0.2, 0.2),
    kl_coef=0.0,
    lam=None,
    scope="prompt",
    scale="none",
    agg="grpo",
    ref=None,
    ref_coef=0.0,
):
    """Loss from the GEPO formulas, float64, loops. `lam` is a per-row list of defensive lambdas (None = plain)."""
    B, T = lp.shape
    all_r = [float(r) for r in rewards]
    batch_std = math.sqrt(sum((x - sum(all_r) / B) ** 2 for x in all_r) / (B - 1)) if B > 1 else 0.0
    members: dict = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    adv = [0.0] * B
    for rows in members.values():
        rs = [float(rewards[i]) for i in rows]
        mean = sum(rs) / len(rs)
        if len(rs) < 2 or max(rs) == min(rs):
            continue
        std = math.sqrt(sum((x - mean) ** 2 for x in rs) / (len(rs) - 1))
        for i in rows:
            div = {"group": std + 1e-4, "batch": batch_std + 1e-4, "none": 1.0}[scale]
            adv[i] = (float(rewards[i]) - mean) / div
    length = [max(1, int(sum(int(mask[i, t]) for t in range(T)))) for i in range(B)]
    toks = [[t for t in range(T) if mask[i, t]] for i in range(B)]
    zero = torch.zeros((), dtype=torch.float64)
    LP = [sum((lp[i, t] for t in toks[i]), zero) / length[i] for i in range(B)]
    LQ = [sum(float(lq[i, t]) for t in toks[i]) / length[i] for i in range(B)]

    def surrogate(w, a):
        clipped = torch.clamp(w, 1 - eps[0], 1 + eps[1])
        return -torch.minimum(w * a, clipped * a)

    # the GEPO authors' micro-batches: a seeded shuffle (seed 0, policy_loss's default) cut into sets of 8 rows
    perm = torch.randperm(B, generator=torch.Generator().manual_seed(0)).tolist()
    sets = {row: perm[k - k % 8 : k - k % 8 + 8] for k, row in enumerate(perm)}
    per_seq = []
    if algorithm == "grpo":
        tok_losses = []
        for i in range(B):
            terms = [surrogate(torch.exp(lp[i, t] - float(lq[i, t])), adv[i]) for t in toks[i]]
            tok_losses.append(terms)
            per_seq.append(sum(terms, torch.zeros((), dtype=torch.float64)) / length[i])
        if agg in ("bnpo", "dapo"):
            pg = sum(sum(ts, torch.zeros((), dtype=torch.float64)) for ts in tok_losses) / max(1, sum(map(len, toks)))
        elif agg == "dr_grpo":
            pg = sum(sum(ts, torch.zeros((), dtype=torch.float64)) for ts in tok_losses) / (B * T)
        else:
            pg = sum(per_seq) / B
    else:
        for i in range(B):
            p_i = torch.exp(LP[i])
            if algorithm == "gspo":
                w = p_i / math.exp(LQ[i])
            else:
                js = sets[i] if scope == "microbatch" else members[groups[i]]
                qs = [math.exp(LQ[j]) for j in js]
                e_q = sum(q * q for q in qs) / sum(qs)
                lam_i = 0.0 if lam is None else lam[i]
                w = p_i / (lam_i * p_i.detach() + (1 - lam_i) * e_q)
            per_seq.append(surrogate(w, adv[i]))
        if agg in ("bnpo", "dapo"):  # each sequence's loss counts once per token
            pg = sum(len(toks[i]) * per_seq[i] for i in range(B)) / max(1, sum(map(len, toks)))
        elif agg == "dr_grpo":
            pg = sum(len(toks[i]) * per_seq[i] for i in range(B)) / (B * T)
        else:
            pg = sum(per_seq) / B

    # the k3 penalties per token (to the sampler: lq; to the reference model: ref), aggregated like the policy
    # loss (TRL adds its KL term before the aggregation)
    def kl(other):
        kl_tok = [
            [torch.exp(float(other[i, t]) - lp[i, t]) - (float(other[i, t]) - lp[i, t]) - 1 for t in toks[i]]
            for i in range(B)
        ]
        if agg in ("bnpo", "dapo"):
            return sum(sum(ks, zero) for ks in kl_tok) / max(1, sum(map(len, toks)))
        if agg == "dr_grpo":
            return sum(sum(ks, zero) for ks in kl_tok) / (B * T)
        return sum(sum(ks, zero) / length[i] for i, ks in enumerate(kl_tok)) / B

    return pg + kl_coef * kl(lq) + (ref_coef * kl(ref) if ref_coef else 0.0)
