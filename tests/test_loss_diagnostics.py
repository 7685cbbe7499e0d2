"""The learner's diagnostics against hand computations and exact values: the paper's importance-weight variance
(the same statistic for every loss family), the sampler KL and the policy entropy."""

from __future__ import annotations

import math

import pytest
import torch

from swarmnode.config import LEVEL_OF_ALGORITHM, LearnerConfig
from swarmnode.learner.losses import ALGORITHMS, policy_loss, ratio_peqq_variance

torch.set_num_threads(1)


def _fixed_batch(rows: int, T: int = 3):
    """A fixed batch: hand-written per-token log-probs (rows of 4-member groups), a ragged mask, rewards."""
    lq = torch.tensor([[-0.2 - 0.13 * ((3 * i + t) % 7) for t in range(T)] for i in range(rows)], dtype=torch.float64)
    lp = lq + torch.tensor(
        [[0.05 * (((5 * i + 2 * t) % 9) - 4) for t in range(T)] for i in range(rows)], dtype=torch.float64
    )
    mask = torch.tensor([[t < T - (i % 2) for t in range(T)] for i in range(rows)])
    rewards = torch.tensor([float((i * 7) % 3) / 2 for i in range(rows)], dtype=torch.float64)
    groups = torch.arange(rows) // 4
    return lp, lq, mask, rewards, groups


def _hand_statistic(lp, lq, mask, seed: int) -> float:
    """The paper's statistic in plain Python: length-normalised p_i and q_i, rows shuffled by the same seeded
    permutation, 8-row micro-batches, E_q[q] = sum q^2 / sum q in each, unbiased variance of p_i / E_q[q]."""
    rows = lp.shape[0]
    p, q = [], []
    for i in range(rows):
        toks = [t for t in range(lp.shape[1]) if mask[i, t]]
        p.append(math.exp(sum(float(lp[i, t]) for t in toks) / len(toks)))
        q.append(math.exp(sum(float(lq[i, t]) for t in toks) / len(toks)))
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(seed)).tolist()
    variances = []
    for start in range(0, rows, 8):
        idx = order[start : start + 8]
        if len(idx) < 2:
            continue
        e_q = sum(q[j] ** 2 for j in idx) / sum(q[j] for j in idx)
        ratios = [p[j] / e_q for j in idx]
        mean = sum(ratios) / len(ratios)
        variances.append(sum((r - mean) ** 2 for r in ratios) / (len(ratios) - 1))
    return sum(variances) / len(variances)


@pytest.mark.parametrize("family", ALGORITHMS)
@pytest.mark.parametrize("rows,seed", [(16, 0), (12, 3), (17, 5)])  # 8+8; 8+4; 8+8+1 (a lone row is left out)
def test_paper_statistic_matches_hand_computation_for_every_loss(family, rows, seed):
    lp, lq, mask, rewards, groups = _fixed_batch(rows)
    cfg = LearnerConfig(importance_sampling_level=LEVEL_OF_ALGORITHM[family])
    _, diag = policy_loss(family, lp, lq, mask, rewards, groups, cfg, shuffle_seed=seed)
    expected = _hand_statistic(lp, lq, mask, seed)
    assert diag["ratio_peqq_var"] == pytest.approx(expected, rel=1e-10)
    assert expected > 0


def test_paper_statistic_differs_from_own_weight_variance_on_policy():
    """On-policy GRPO/GSPO weights are exactly 1 (own variance 0); the paper's statistic is not 0."""
    _, lq, mask, rewards, groups = _fixed_batch(16)
    for family in ("grpo", "gspo"):
        cfg = LearnerConfig(importance_sampling_level=LEVEL_OF_ALGORITHM[family])
        _, diag = policy_loss(family, lq.clone(), lq, mask, rewards, groups, cfg)
        assert diag["is_weight_var"] == pytest.approx(0.0, abs=1e-15)
        assert diag["ratio_peqq_var"] > 1e-4


def test_paper_statistic_of_too_few_rows_is_zero():
    assert ratio_peqq_variance(torch.tensor([-1.0]), torch.tensor([-1.2])) == 0.0


# Two small categorical distributions over 5 symbols: q samples, p is the learner. Symbol 4 is rare under p
# (p << q there), where the old estimator exp(lq - lp) - (lq - lp) - 1 has a heavy tail.
Q = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.10], dtype=torch.float64)
P = torch.tensor([0.40, 0.20, 0.25, 0.145, 0.005], dtype=torch.float64)
N_SEQ, T_SEQ = 2000, 50  # 100,000 tokens drawn from q


def _tokens_from_q(seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.multinomial(Q, N_SEQ * T_SEQ, replacement=True, generator=gen).view(N_SEQ, T_SEQ)
    return torch.log(P)[x], torch.log(Q)[x]


def test_kl_estimate_matches_exact_kl_in_expectation():
    """diag['kl'] estimates KL(q || p) per token on samples from q. With 100,000 tokens and a fixed seed, the
    Monte Carlo mean must lie within 4 standard errors of the exact value (a CLT bound: a correct estimator
    misses it with probability ~6e-5, and the seed is fixed, so the test is deterministic)."""
    lp, lq = _tokens_from_q(seed=1)
    mask = torch.ones_like(lp, dtype=torch.bool)
    rewards = torch.arange(N_SEQ, dtype=torch.float64) % 2
    groups = torch.arange(N_SEQ) // 8
    _, diag = policy_loss("gepo", lp, lq, mask, rewards, groups, LearnerConfig())
    exact = float((Q * (Q.log() - P.log())).sum())
    r = torch.exp(lp - lq)
    per_token = (r - 1) - torch.log(r)
    stderr = float(per_token.std()) / math.sqrt(per_token.numel())
    assert abs(diag["kl"] - exact) < 4 * stderr, (diag["kl"], exact, stderr)
    assert stderr < 0.05 * exact  # the bound is tight enough to mean something
    old = torch.exp(lq - lp) - (lq - lp) - 1  # the estimator the diagnostic used to report
    assert abs(float(old.mean()) - exact) > 10 * stderr  # ... whose expectation is not KL(q || p)


def test_entropy_matches_exact_entropy_of_the_sampling_distribution():
    lp, lq = _tokens_from_q(seed=2)
    mask = torch.ones_like(lp, dtype=torch.bool)
    _, diag = policy_loss(
        "grpo",
        lp,
        lq,
        mask,
        torch.arange(N_SEQ, dtype=torch.float64) % 2,
        torch.arange(N_SEQ) // 8,
        LearnerConfig(importance_sampling_level="token"),
    )
    exact = float(-(Q * Q.log()).sum())
    stderr = float((-lq).std()) / math.sqrt(lq.numel())
    assert abs(diag["entropy"] - exact) < 4 * stderr


def test_kl_stays_finite_where_p_is_far_above_or_below_q():
    lq = torch.tensor([[-1.0, -200.0, -0.5]], dtype=torch.float64).repeat(2, 1)
    lp = torch.tensor([[-300.0, -0.1, -0.5], [-0.5, -0.5, -0.5]], dtype=torch.float64)
    mask = torch.ones_like(lp, dtype=torch.bool)
    _, diag = policy_loss("gepo", lp, lq, mask, torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), LearnerConfig())
    assert math.isfinite(diag["kl"]) and diag["kl"] > 0


def test_on_policy_grpo_and_gspo_take_the_same_gradient():
    """With p = q every GRPO and GSPO weight is 1 and no clip binds (whatever epsilon), so one step on fresh
    rollouts has the same gradient: why the sweep's on-policy grpo, gspo and gspo-3e-4 cells coincide."""
    lp, lq, mask, rewards, groups = _fixed_batch(16, T=5)
    grads = []
    for family, opts in (("grpo", {}), ("gspo", {}), ("gspo", {"epsilon": 3e-4, "epsilon_high": 4e-4})):
        x = lq.clone().requires_grad_(True)
        cfg = LearnerConfig(importance_sampling_level=LEVEL_OF_ALGORITHM[family], **opts)
        loss, _ = policy_loss(family, x, lq, mask, rewards, groups, cfg)
        (grad,) = torch.autograd.grad(loss, x)
        grads.append(grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-12) and torch.allclose(grads[1], grads[2], atol=1e-12)
    x = lq.clone().requires_grad_(True)
    gepo, _ = policy_loss("gepo", x, lq, mask, rewards, groups, LearnerConfig())
    assert not torch.allclose(torch.autograd.grad(gepo, x)[0], grads[0])  # GEPO's weights are not 1 on-policy
