"""A step's figures and its gradient, however it is cut: token-level figures are token-weighted over unequal
micro-batches, the normaliser can count every drawn row (TRL's), the poisoned-micro-batch path keeps the weights of
the groups it keeps, the schedule does not move on a step the optimiser skipped, and dynamic sampling fills a step
with groups that carry signal."""

from __future__ import annotations

import math

import pytest
import torch
from learner_helpers import copy_of, make_loop, signal_groups
from microbatch_helpers import cfg, parts  # noqa: F401  (the fixtures: tiny model at temperature 1.3)

from swarmnode.identity import Identity
from swarmnode.learner.rows import Row


@pytest.fixture(scope="module")
def signal_rows(cfg, parts):
    loop = make_loop(cfg, parts)
    return [loop.rows.rows(g, 0) for g in signal_groups(cfg, parts, 2)]


def _moved(loop):
    """The learner off the sampler's weights (so weights differ from 1 and clip)."""
    with torch.no_grad():
        for p in loop.model.parameters():
            p.add_(0.3 * torch.sin(torch.arange(p.numel(), dtype=p.dtype)).reshape(p.shape))
    return loop


def _grads(loop, groups):
    loop.model.zero_grad(set_to_none=True)
    diag = loop.accumulate_gradients(groups)
    return {n: p.grad.clone() for n, p in loop.model.named_parameters() if p.grad is not None}, diag


def test_token_figures_are_token_weighted_over_unequal_micro_batches(cfg, parts, signal_rows):
    kw = dict(importance_sampling_level="token", epsilon=0.05)
    whole = _moved(make_loop(cfg, parts, **kw))
    split = _moved(make_loop(cfg, parts, max_tokens_per_microbatch=1, **kw))  # every row alone: unequal sizes
    groups = [  # rows of unequal lengths (cut to 2..6 tokens)
        [Row(r.group, r.completion[: 2 + i % 5], r.logq[: 2 + i % 5], r.reward, 0) for i, r in enumerate(g)]
        for g in signal_rows
    ]
    _, one = _grads(whole, groups)
    _, cut = _grads(split, groups)
    assert len({len(r.completion) for g in groups for r in g}) > 1
    assert 0 < one["clip_fraction"] < 1
    for key in ("clip_fraction", "entropy", "learner_entropy", "kl", "is_weight_mean", "is_weight_var", "loss"):
        assert cut[key] == pytest.approx(one[key], rel=1e-5, abs=1e-9), key


def _zero_signal(rows: list[Row]) -> list[Row]:
    """A group whose every completion is its first one: one reward for all, no signal."""
    return [Row(rows[0].group, rows[0].completion, rows[0].logq, rows[0].reward, 0) for _ in rows]


def test_drawn_normaliser_keeps_zero_signal_rows_in_the_mean(cfg, parts, signal_rows):
    groups = signal_rows[:2] + [_zero_signal(signal_rows[0])]
    trained_rows = sum(len(g) for g in groups[:2])
    drawn_rows = sum(len(g) for g in groups)
    g_trained, _ = _grads(make_loop(cfg, parts), groups)
    g_drawn, _ = _grads(make_loop(cfg, parts, loss_normaliser="drawn"), groups)
    for name, g in g_trained.items():  # the mean over every drawn row: (trained / drawn) x the trained-row mean
        assert torch.allclose(g_drawn[name], g * trained_rows / drawn_rows, rtol=1e-4, atol=1e-8), name
    assert any(float(g.abs().max()) > 0 for g in g_trained.values())


def test_a_poisoned_group_leaves_the_kept_groups_weights(cfg, parts, signal_rows):
    kept, bad = signal_rows[0], signal_rows[1]
    poisoned = [Row(r.group, r.completion, [math.nan] * len(r.logq), r.reward, 0) for r in bad]
    loop = make_loop(cfg, parts)
    g_alone, _ = _grads(loop, [kept])
    g_mixed, _ = _grads(loop, [kept, poisoned])  # one micro-batch: its loss is not finite, the group is dropped
    assert loop.rejected["poisoned_group"] == 1
    share = len(kept) / (len(kept) + len(poisoned))  # the kept group's part of the whole micro-batch's mean
    for name, g in g_alone.items():
        assert torch.allclose(g_mixed[name], g * share, rtol=1e-5, atol=1e-9), name


def test_the_schedule_does_not_move_on_a_skipped_step(cfg, parts, signal_rows):
    loop = make_loop(cfg, parts, warmup_steps=4)
    with torch.no_grad():
        next(loop.model.parameters()).fill_(math.inf)  # every loss and gradient is not finite
    assert loop.scheduler.last_epoch == 0
    loop._optimise(signal_rows[:2])
    assert loop.rejected["nonfinite_grad_steps"] == 1
    assert loop.scheduler.last_epoch == 0  # the warmup still starts at its first step


@pytest.mark.parametrize("dynamic", [False, True])
def test_dynamic_sampling_fills_the_step_with_signal(cfg, parts, dynamic):
    loop = make_loop(cfg, parts, prompts_per_step=2, dynamic_sampling=dynamic, draw_order="oldest")
    groups = signal_groups(cfg, parts, 6)
    with_signal = groups[:2]
    others = [g for g in groups[2:] if g.prompt_id not in {w.prompt_id for w in with_signal}]
    others = list({g.prompt_id: g for g in others}.values())[:2]
    assert len(others) == 2
    flat = [  # every completion the first one: one reward for all
        copy_of(
            g,
            Identity.generate(),
            completions=[g.completions[0]] * len(g.completions),
            logprobs=[g.logprobs[0]] * len(g.logprobs),
        )
        for g in others
    ]
    for g in flat + with_signal:  # oldest first: the two zero-signal groups are drawn first
        loop.buffer.add(g)
    out = loop.step()
    assert out is not None
    assert out["groups_trained"] == (2.0 if dynamic else 0.0)
    assert out["zero_signal_skipped"] == (2.0 if dynamic else 0.0)
    assert set(loop.saturated.snapshot()) == {g.prompt_id for g in others}  # the flat prompts, for the samplers
