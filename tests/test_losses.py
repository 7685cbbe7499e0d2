"""GEPO/GSPO/GRPO losses against an independent float64 reference written from the GEPO paper's formulas
(`loss_helpers.reference_loss`).

The reference works in probability space with explicit Python loops over rows, tokens and groups (fine for the
small, moderate log-probs used here); the code under test works in log space with vectorised group ops.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from loss_helpers import reference_loss

from swarmnode.config import LEVEL_OF_ALGORITHM, LearnerConfig
from swarmnode.learner.losses import log_importance_weights, policy_loss

torch.set_num_threads(1)


def lcfg(family: str, **opts) -> LearnerConfig:
    """The learner config of a loss family (gepo | gspo | grpo) with new-style options."""
    return LearnerConfig(importance_sampling_level=LEVEL_OF_ALGORITHM[family], **opts)


def random_batch(groups: int, g: int, T: int, seed: int, spread: float = 0.3):
    gen = torch.Generator().manual_seed(seed)
    B = groups * g
    lq = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 2.5 - 0.05
    lp = lq + spread * torch.randn(B, T, generator=gen, dtype=torch.float64)
    lengths = torch.randint(0, T + 1, (B,), generator=gen)
    lengths[0] = T
    mask = torch.arange(T)[None, :] < lengths[:, None]
    rewards = torch.randint(0, 4, (B,), generator=gen).to(torch.float64) / 3
    rewards[:g] = 0.5  # the first group has no signal
    group_index = torch.arange(groups).repeat_interleave(g) * 7 + 3  # arbitrary labels
    perm = torch.randperm(B, generator=gen)  # rows of one group need not be adjacent
    return lp[perm], lq[perm], mask[perm], rewards[perm], group_index[perm]


OPTIONS = [
    ("gepo", {}),
    ("gepo", {"gepo_defensive_lambda": 0.3}),
    ("gepo", {"gepo_defensive_lambda": 1.0}),
    ("gepo", {"gepo_group_scope": "microbatch"}),
    ("gepo", {"cppo_beta": 0.05}),
    ("gepo", {"scale_rewards": "group"}),
    ("gepo", {"epsilon": 0.1, "epsilon_high": 0.28}),
    ("gepo", {"loss_type": "dr_grpo"}),
    ("gspo", {}),
    ("gspo", {"epsilon": 3e-4, "epsilon_high": 4e-4}),
    ("gspo", {"cppo_beta": 0.1, "scale_rewards": "batch"}),
    ("gspo", {"loss_type": "bnpo"}),
    ("grpo", {}),
    ("grpo", {"loss_type": "bnpo", "scale_rewards": "group"}),
    ("grpo", {"loss_type": "dapo"}),
    ("grpo", {"loss_type": "dr_grpo", "cppo_beta": 0.02}),
]


def _ref_kwargs(algorithm, opts, B):
    lo = opts.get("epsilon", 0.2)
    hi = opts.get("epsilon_high", lo)
    lam = [opts["gepo_defensive_lambda"]] * B if "gepo_defensive_lambda" in opts else None
    return dict(
        eps=(lo, hi),
        kl_coef=opts.get("cppo_beta", 0.0),
        lam=lam,
        scope=opts.get("gepo_group_scope", "prompt"),
        scale=opts.get("scale_rewards", "none"),
        agg=opts.get("loss_type", "grpo"),
    )


@pytest.mark.parametrize("algorithm,opts", OPTIONS, ids=[f"{t}-{o}" for t, o in OPTIONS])
@pytest.mark.parametrize("shape", [(1, 2, 1), (3, 4, 5), (4, 8, 12)])
def test_matches_reference_value_and_gradient(algorithm, opts, shape):
    groups, g, T = shape
    lp0, lq, mask, rewards, gi = random_batch(groups, g, T, seed=hash((algorithm, str(opts), shape)) % 10_000)
    cfg = lcfg(algorithm, **opts)
    lp = lp0.clone().requires_grad_(True)
    loss, diag = policy_loss(algorithm, lp, lq, mask, rewards, gi, cfg)
    loss.backward()
    lp_ref = lp0.clone().requires_grad_(True)
    ref = reference_loss(
        algorithm, lp_ref, lq, mask, rewards, gi.tolist(), **_ref_kwargs(algorithm, opts, lp0.shape[0])
    )
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-9, abs=1e-12)
    assert torch.allclose(lp.grad, lp_ref.grad, rtol=1e-8, atol=1e-12)
    assert diag["loss"] == pytest.approx(ref.item(), rel=1e-9, abs=1e-12)


def test_staleness_schedule_matches_reference():
    lp0, lq, mask, rewards, gi = random_batch(3, 4, 6, seed=11, spread=0.6)
    tau = torch.tensor([0, 1, 2, 5, 9, 0, 3, 3, 1, 0, 7, 2])
    cfg = LearnerConfig(gepo_defensive_lambda=0.2, gepo_defensive_schedule="staleness")
    lp = lp0.clone().requires_grad_(True)
    loss, diag = policy_loss("gepo", lp, lq, mask, rewards, gi, cfg, staleness=tau)
    loss.backward()
    lam = [1 - 0.8 ** int(t) for t in tau]
    lp_ref = lp0.clone().requires_grad_(True)
    ref = reference_loss("gepo", lp_ref, lq, mask, rewards, gi.tolist(), lam=lam)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-9)
    assert torch.allclose(lp.grad, lp_ref.grad, rtol=1e-8, atol=1e-12)
    assert diag["staleness_min"] == 0 and diag["staleness_max"] == 9 and diag["staleness_median"] == 2
    assert {"kl_tau_0", "kl_tau_1", "kl_tau_2-3", "kl_tau_4-7", "kl_tau_8-15"} <= diag.keys()


def test_defensive_lambda_one_is_plain_policy_gradient():
    """lam = 1: w == 1 and the gradient is that of -mean(A * LP)."""
    lp0, lq, mask, rewards, gi = random_batch(2, 4, 5, seed=3, spread=1.0)
    cfg = LearnerConfig(gepo_defensive_lambda=1.0)
    logw = log_importance_weights("gepo", lp0, lq, mask, gi, cfg)
    assert torch.allclose(logw, torch.zeros_like(logw))


@pytest.mark.parametrize("algorithm,opts", OPTIONS, ids=[f"{t}-{o}" for t, o in OPTIONS])
def test_gradcheck(algorithm, opts):
    if opts.get("gepo_defensive_lambda"):
        pytest.skip("stop-gradient in the denominator: finite differences cannot see it (reference test covers it)")
    lp0, lq, mask, rewards, gi = random_batch(2, 3, 4, seed=5, spread=0.05)
    cfg = lcfg(algorithm, **opts)
    tau = torch.tensor([0, 1, 2, 0, 3, 1])

    def f(lp):
        return policy_loss(algorithm, lp, lq, mask, rewards, gi, cfg, staleness=tau)[0]

    assert torch.autograd.gradcheck(f, (lp0.clone().requires_grad_(True),), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("algorithm", ["gspo", "grpo"])
def test_on_policy_weights_are_one(algorithm):
    _, lq, mask, rewards, gi = random_batch(3, 4, 7, seed=8)
    cfg = lcfg(algorithm)
    logw = log_importance_weights(algorithm, lq.clone(), lq, mask, gi, cfg)
    assert torch.allclose(logw, torch.zeros_like(logw))
    _, diag = policy_loss(algorithm, lq.clone(), lq, mask, rewards, gi, cfg)
    assert diag["is_weight_mean"] == pytest.approx(1.0) and diag["is_weight_var"] == pytest.approx(0.0, abs=1e-12)
    assert diag["clip_fraction"] == 0 and diag["kl"] == pytest.approx(0.0, abs=1e-12)


def test_gepo_denominator_is_q_weighted_mean():
    _, lq, mask, rewards, gi = random_batch(3, 4, 7, seed=9)
    w = torch.exp(log_importance_weights("gepo", lq.clone(), lq, mask, gi, LearnerConfig()))
    lengths = mask.sum(1).clamp(min=1)
    q = torch.exp((lq * mask).sum(1) / lengths)
    for label in gi.unique():
        sel = gi == label
        expected = (q[sel] ** 2).sum() / q[sel].sum()
        # on-policy p_i = q_i, so q_i / w_i recovers the shared denominator E_q[q]
        assert torch.allclose(q[sel] / w[sel], expected.expand(int(sel.sum())), rtol=1e-10)
    assert not torch.allclose(w, torch.ones_like(w))  # GEPO's weights are not 1 even on-policy


@pytest.mark.parametrize(
    "algorithm,opts",
    [
        ("gepo", {"cppo_beta": 0.005}),
        ("gepo", {"gepo_defensive_lambda": 0.5}),
        ("gspo", {"cppo_beta": 0.005}),
        ("grpo", {"cppo_beta": 0.005}),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_completions_stay_finite(algorithm, opts, dtype):
    gen = torch.Generator().manual_seed(0)
    B, T = 8, 4000
    lq = -20 + torch.randn(B, T, generator=gen)
    lp = (lq + 0.5 * torch.randn(B, T, generator=gen)).to(dtype).requires_grad_(True)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 3000:] = False
    mask[2, :] = False  # an empty completion
    rewards = torch.tensor([0.0, 1, 0, 1, 1, 1, 0, 0.5])
    gi = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    loss, diag = policy_loss(algorithm, lp, lq, mask, rewards, gi, lcfg(algorithm, **opts))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()
    assert all(math.isfinite(v) for v in diag.values()), diag
    assert lp.grad.abs().sum() > 0


def test_padding_garbage_does_not_leak():
    lp0, lq, mask, rewards, gi = random_batch(2, 4, 6, seed=2)
    lp_bad = torch.where(mask, lp0, torch.full_like(lp0, -math.inf)).requires_grad_(True)
    lq_bad = torch.where(mask, lq, torch.full_like(lq, 1e4))
    for algorithm in ("gepo", "gspo", "grpo"):
        cfg = lcfg(algorithm, cppo_beta=0.1)
        loss, _ = policy_loss(algorithm, lp_bad, lq_bad, mask, rewards, gi, cfg)
        good, _ = policy_loss(algorithm, lp0, lq, mask, rewards, gi, cfg)
        (grad,) = torch.autograd.grad(loss, lp_bad)
        assert loss.item() == pytest.approx(good.item()) and torch.isfinite(grad).all()


def test_diagnostics_values():
    lp0, lq, mask, rewards, gi = random_batch(4, 4, 5, seed=4, spread=0.4)
    _, diag = policy_loss("grpo", lp0, lq, mask, rewards, gi, lcfg("grpo"))
    lengths = mask.sum(1).clamp(min=1)
    seq_w = ((torch.exp(lp0 - lq) * mask).sum(1) / lengths)[mask.any(1)]
    assert diag["is_weight_mean"] == pytest.approx(seq_w.mean().item())
    assert diag["is_weight_var"] == pytest.approx(seq_w.var(unbiased=False).item())
    assert diag["reward_mean"] == pytest.approx(rewards.mean().item())
    zero_groups = sum(1 for g in gi.unique() if rewards[gi == g].unique().numel() == 1)
    assert diag["zero_signal_fraction"] == pytest.approx(zero_groups / 4)
    assert 0 < diag["clip_fraction"] < 1


def test_bad_inputs_raise_clear_errors():
    lp0, lq, mask, rewards, gi = random_batch(1, 2, 3, seed=1)
    with pytest.raises(ValueError, match="loss family"):
        policy_loss("ppo", lp0, lq, mask, rewards, gi, LearnerConfig())
    with pytest.raises(ValueError, match="shape"):
        policy_loss("gepo", lp0, lq[:, :2], mask, rewards, gi, LearnerConfig())
    with pytest.raises(ValueError, match="staleness"):
        policy_loss("gepo", lp0, lq, mask, rewards, gi, LearnerConfig(gepo_defensive_schedule="staleness"))


def test_random_seeds_many_shapes():
    rng = random.Random(0)
    for _ in range(10):
        groups, g, T = rng.randint(1, 4), rng.randint(2, 6), rng.randint(1, 9)
        lp0, lq, mask, rewards, gi = random_batch(groups, g, T, seed=rng.randint(0, 999))
        for algorithm in ("gepo", "gspo", "grpo"):
            loss, _ = policy_loss(algorithm, lp0, lq, mask, rewards, gi, lcfg(algorithm))
            ref = reference_loss(algorithm, lp0, lq, mask, rewards, gi.tolist(), **_ref_kwargs(algorithm, {}, len(gi)))
            assert loss.item() == pytest.approx(float(ref), rel=1e-9, abs=1e-12)


def test_cppo_kl_penalty_stays_finite_and_keeps_its_gradient_far_below_the_sampler():
    from swarmnode.learner.losses import KL_LINEAR_FROM, cppo_kl_penalty

    lq = torch.zeros(1, 4, dtype=torch.float64)
    lp = torch.tensor([[-0.5, -KL_LINEAR_FROM, -50.0, -1000.0]], dtype=torch.float64, requires_grad=True)
    k3 = cppo_kl_penalty(lp, lq)
    near = [math.exp(0.5) - 0.5 - 1, math.expm1(KL_LINEAR_FROM) - KL_LINEAR_FROM]
    assert k3[0, :2].tolist() == pytest.approx(near, rel=1e-12)  # the authors' k3 up to the bend
    assert torch.isfinite(k3).all() and float(k3[0, 3]) > float(k3[0, 2]) > float(k3[0, 1])
    k3.sum().backward()
    slope = -math.expm1(KL_LINEAR_FROM)
    assert lp.grad[0, 0] == pytest.approx(-math.expm1(0.5))
    assert lp.grad[0, 2:].tolist() == pytest.approx([slope, slope])  # linear beyond: the pull never vanishes


def test_dr_grpo_divides_by_the_constant_max_completion_length():
    lp, lq, mask, rewards, gi = random_batch(2, 4, 6, seed=3)
    mask[:, 3:] = False  # completions of at most 3 tokens under a limit of 64
    cfg = lcfg("grpo", loss_type="dr_grpo")
    short, _ = policy_loss(None, lp, lq, mask, rewards, gi, cfg)  # without the limit: the padded width (6)
    fixed, _ = policy_loss(None, lp, lq, mask, rewards, gi, cfg, max_completion_length=64)
    assert float(fixed) == pytest.approx(float(short) * 6 / 64, rel=1e-12)


@pytest.mark.parametrize(
    "loss_type,opts",
    [
        ("grpo", {"beta": 0.04}),
        ("gepo", {"beta": 0.04, "cppo_beta": 0.01}),
        ("gspo", {"beta": 0.1, "loss_type": "bnpo"}),
    ],
)
def test_trl_beta_is_a_kl_to_the_reference_model(loss_type, opts):
    lp0, lq, mask, rewards, gi = random_batch(3, 4, 5, seed=11)
    ref = lq + 0.2 * torch.randn(lq.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    cfg = lcfg(loss_type, **opts)
    lp = lp0.clone().requires_grad_(True)
    loss, diag = policy_loss(None, lp, lq, mask, rewards, gi, cfg, ref_logp=ref)
    loss.backward()
    lp_ref = lp0.clone().requires_grad_(True)
    kwargs = _ref_kwargs(loss_type, opts, lp0.shape[0])
    want = reference_loss(loss_type, lp_ref, lq, mask, rewards, gi.tolist(), **kwargs, ref=ref, ref_coef=opts["beta"])
    want.backward()
    assert loss.item() == pytest.approx(want.item(), rel=1e-9)
    assert torch.allclose(lp.grad, lp_ref.grad, atol=1e-10)
    assert diag["ref_kl"] > 0
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(None, lp0, lq, mask, rewards, gi, cfg)
