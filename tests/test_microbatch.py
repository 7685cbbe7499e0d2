"""Row-level micro-batches by a token budget: group statistics first, then any split gives the unsplit gradient."""

from __future__ import annotations

import pytest
import torch
from learner_helpers import make_loop, sampled_groups
from microbatch_helpers import cfg, parts  # noqa: F401  (module fixtures: the tiny model at temperature 1.3)

from swarmnode.learner.microbatch import loss_share, token_budget_batches


def test_token_budget_batches():
    sizes = [(3, 5), (3, 1), (4, 6), (2, 2), (3, 0)]
    assert token_budget_batches(sizes, 0) == [[0, 1, 2, 3, 4]]
    batches = token_budget_batches(sizes, 16)
    assert sorted(i for b in batches for i in b) == list(range(5))
    for b in batches:  # within budget unless a row alone exceeds it
        padded = len(b) * (max(sizes[i][0] for i in b) + max(1, max(sizes[i][1] for i in b)))
        assert padded <= 16 or len(b) == 1
    assert token_budget_batches(sizes, 1) == [[4], [1], [3], [0], [2]]  # one row each, shortest first
    lengths = [5, 1, 6, 2, 0]
    halves = [[5, 1], [6, 2, 0]]
    for agg in ("grpo", "bnpo", "dapo"):
        assert sum(loss_share(agg, b, lengths, lengths) for b in halves) == pytest.approx(1.0)
    assert loss_share("bnpo", [5, 1], lengths, lengths) == pytest.approx(6 / 14)
    assert loss_share("dr_grpo", [5, 1], lengths, lengths) == pytest.approx(2 / 5)  # a constant normaliser
    assert loss_share("bnpo", [5, 1], lengths, lengths + [3] * 5) == pytest.approx(0.5 * 6 / 14)


def _grads(loop, groups) -> tuple[dict[str, torch.Tensor], list[float]]:
    loop.model.zero_grad(set_to_none=True)
    diag = loop.accumulate_gradients(groups)
    grads = {n: p.grad.clone() for n, p in loop.model.named_parameters() if p.grad is not None}
    return grads, diag["ratio_peqq_var"]


@pytest.mark.parametrize(
    "overrides",
    [
        dict(importance_sampling_level="group"),
        dict(importance_sampling_level="group", gepo_group_scope="microbatch", gradient_accumulation_steps=2),
        dict(importance_sampling_level="sequence", cppo_beta=0.1, scale_rewards="batch"),
        dict(importance_sampling_level="token", loss_type="bnpo", gradient_accumulation_steps=2),
        dict(importance_sampling_level="token", loss_type="dr_grpo", gradient_accumulation_steps=2),
        dict(importance_sampling_level="group", loss_type="dapo", gradient_accumulation_steps=2),
        dict(importance_sampling_level="token", loss_type="dr_grpo", cppo_beta=0.1, gradient_accumulation_steps=2),
        dict(importance_sampling_level="group", loss_type="bnpo", cppo_beta=0.1),
        dict(importance_sampling_level="token", beta=0.1, learning_rate=1e-2, gradient_accumulation_steps=2),
    ],
)
def test_split_rows_give_the_unsplit_gradient(cfg, parts, overrides):
    groups = sampled_groups(cfg, parts, 2)
    whole = make_loop(cfg, parts, **overrides)
    split = make_loop(cfg, parts, max_tokens_per_microbatch=1, **overrides)  # every row alone
    if overrides.get("beta"):  # move both learners off their (frozen) reference the same way: a non-zero KL term
        with torch.no_grad():
            for loop in (whole, split):
                for p in loop.model.parameters():
                    p.add_(0.05 * torch.sin(torch.arange(p.numel(), dtype=p.dtype)).reshape(p.shape))
    rows = [r for g in groups if (r := whole.rows.rows(g, whole.version)) and len({x.reward for x in r}) > 1]
    assert len(rows) >= 2, "the sampled batch should hold at least two groups with signal"
    (reference, ref_var), (got, got_var) = _grads(whole, rows), _grads(split, rows)
    assert got_var == pytest.approx(ref_var, rel=1e-5)  # the paper's statistic is taken over the whole step
    assert reference.keys() == got.keys()
    for name, g in reference.items():
        assert (got[name] - g).abs().max() <= 1e-6 * max(1.0, float(g.abs().max())), name
    assert any(float(g.abs().max()) > 0 for g in reference.values())
