"""A step's statistics are taken once over every group drawn, before any split, against hand computations: batch
std over every reward (zero-signal groups included, as TRL), GEPO's E_q[q] per prompt or over the authors'
shuffled 8-row sets, and the paper's ratio_peqq_var over the step's trained rows; with gradient accumulation > 1
the step's gradient is the one of the unsplit loss with these statistics."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from learner_helpers import FAST, make_loop, sampled_groups

from swarmnode.config import LearnerConfig, load_config
from swarmnode.learner.losses import microbatch_scope, policy_loss
from swarmnode.learner.step_stats import step_stats
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.models import load_tokenizer
from swarmnode.sampler.build import build_engine
from swarmnode.tasks import build_task

REWARDS = [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]]  # the last group: no signal
LQ = [[-0.5, -1.0, -2.0, -0.1], [-3.0, -0.2, -0.7, -1.1], [-0.4, -0.9, -1.3, -2.2]]


def _hand_adv(rewards, scale):
    flat = [r for g in rewards for r in g]
    out = []
    for g in rewards:
        mean = sum(g) / len(g)
        div = {"batch": statistics.stdev(flat) + 1e-4, "group": statistics.stdev(g) + 1e-4, "none": 1.0}[scale]
        out += [0.0 if max(g) == min(g) else (r - mean) / div for r in g]
    return out


def _hand_log_e(lqs):
    qs = [math.exp(x) for x in lqs]
    return math.log(sum(q * q for q in qs) / sum(qs))


@pytest.mark.parametrize("scale", ["batch", "group", "none"])
def test_advantages_count_every_group_in_the_batch_std(scale):
    stats = step_stats(REWARDS, LQ, LearnerConfig(scale_rewards=scale), seed=0)
    assert stats.adv.tolist() == pytest.approx(_hand_adv(REWARDS, scale), abs=1e-12)
    assert stats.signal.tolist() == [True] * 8 + [False] * 4
    assert stats.group_index.tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_batch_std_differs_from_the_std_of_signal_groups_only():
    with_zero = step_stats(REWARDS, LQ, LearnerConfig(scale_rewards="batch"), 0).adv[:8]
    without = step_stats(REWARDS[:2], LQ[:2], LearnerConfig(scale_rewards="batch"), 0).adv
    assert not torch.allclose(with_zero, without)


def test_gepo_expectation_per_prompt():
    stats = step_stats(REWARDS, LQ, LearnerConfig(), seed=0)
    expected = [_hand_log_e(g) for g in LQ for _ in g]
    assert stats.log_e.tolist() == pytest.approx(expected, abs=1e-12)


def test_gepo_expectation_over_shuffled_eight_row_sets():
    rewards = [[float(i % 2), float(i % 3 == 0), 1.0, 0.0] for i in range(5)]  # 20 rows: sets of 8, 8 and 4
    lqs = [[-0.1 * (4 * g + j + 1) for j in range(4)] for g in range(5)]
    cfg = LearnerConfig(gepo_group_scope="microbatch")
    stats = step_stats(rewards, lqs, cfg, seed=7)
    flat = [x for g in lqs for x in g]
    perm = torch.randperm(20, generator=torch.Generator().manual_seed(7)).tolist()  # the authors' shuffle
    sets = [perm[0:8], perm[8:16], perm[16:20]]
    for rows in sets:
        want = _hand_log_e([flat[i] for i in rows])
        assert [float(stats.log_e[i]) for i in rows] == pytest.approx([want] * len(rows), abs=1e-12)
        assert len({i // 4 for i in rows}) > 1  # rows from mixed prompts
    assert microbatch_scope(20, 8, 7).tolist() != microbatch_scope(20, 8, 8).tolist()  # seeded by the step
    assert sorted(torch.bincount(microbatch_scope(20, 8, 7)).tolist()) == [4, 8, 8]
    assert step_stats(rewards, lqs, cfg.model_copy(update={"gepo_microbatch_rows": 4}), 7).log_e.unique().numel() == 5


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST + ["sampler.temperature=1.3", "learner.prompts_per_step=12"])


@pytest.fixture(scope="module")
def parts(cfg):
    return build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)


@pytest.fixture(scope="module")
def step_groups(cfg, parts):
    loop = make_loop(cfg, parts)
    groups = [rows for g in sampled_groups(cfg, parts, 3) if (rows := loop.rows.rows(g, loop.version))]
    signal = [len({r.reward for r in g}) > 1 for g in groups]
    assert sum(signal) >= 2 and not all(signal), "need groups with and without signal"
    return groups


def _hand_ratio_var(lp, lq, seed):
    perm = torch.randperm(len(lp), generator=torch.Generator().manual_seed(seed)).tolist()
    values = []
    for k in range(0, len(perm), 8):
        rows = perm[k : k + 8]
        if len(rows) < 2:
            continue
        log_e = _hand_log_e([lq[i] for i in rows])
        values.append(statistics.variance([math.exp(lp[i] - log_e) for i in rows]))
    return sum(values) / len(values)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(scale_rewards="batch", gradient_accumulation_steps=3),
        dict(gepo_group_scope="microbatch", gradient_accumulation_steps=4, max_tokens_per_microbatch=40),
        dict(importance_sampling_level="sequence", scale_rewards="batch", gradient_accumulation_steps=2),
    ],
)
def test_gradient_accumulation_keeps_the_steps_statistics(cfg, parts, step_groups, overrides):
    loop = make_loop(cfg, parts, **overrides)
    lc = loop.lc
    loop.model.zero_grad(set_to_none=True)
    diag = loop.accumulate_gradients(step_groups)
    got = {n: p.grad.clone() for n, p in loop.model.named_parameters() if p.grad is not None}

    # by hand: statistics over every group of the step, then one loss over every trained row
    rows = [r for g in step_groups for r in g]
    rewards = [[r.reward for r in g] for g in step_groups]
    lq_seq = [sum(r.logq) / len(r.logq) for r in rows]
    adv = _hand_adv(rewards, lc.scale_rewards)
    if lc.gepo_group_scope == "microbatch":
        scope = microbatch_scope(len(rows), 8, loop.step_count).tolist()
    else:
        scope = [gi for gi, g in enumerate(step_groups) for _ in g]
    log_e = [_hand_log_e([lq_seq[j] for j in range(len(rows)) if scope[j] == scope[i]]) for i in range(len(rows))]
    group_of = [gi for gi, g in enumerate(step_groups) for _ in g]
    keep = [i for i in range(len(rows)) if len(set(rewards[group_of[i]])) > 1]
    trained = [rows[i] for i in keep]
    loop.model.zero_grad(set_to_none=True)
    scores = completion_scores(
        loop.model,
        [r.prompt_tokens for r in trained],
        [r.completion for r in trained],
        [r.temperature for r in trained],
        loop.tokenizer.pad_token_id,
    )
    logq = torch.zeros_like(scores.logp)
    for i, r in enumerate(trained):
        logq[i, : len(r.logq)] = torch.tensor(r.logq)
    group_index = torch.tensor([group_of[i] for i in keep])
    loss, _ = policy_loss(
        None,
        scores.logp,
        logq,
        scores.mask,
        torch.tensor([r.reward for r in trained]),
        group_index,
        lc,
        adv=torch.tensor([adv[i] for i in keep]),
        log_e=torch.tensor([log_e[i] for i in keep]),
        max_completion_length=cfg.sampler.max_completion_length,
    )
    loss.backward()
    for name, p in loop.model.named_parameters():
        if p.grad is not None:
            assert (got[name] - p.grad).abs().max() <= 1e-5 * max(1.0, float(p.grad.abs().max())), name
    assert any(float(g.abs().max()) > 0 for g in got.values())
    with torch.no_grad():
        lp_seq = (scores.logp.sum(1) / scores.mask.sum(1).clamp(min=1)).tolist()
    want = _hand_ratio_var(lp_seq, [lq_seq[i] for i in keep], loop.step_count)
    assert diag["ratio_peqq_var"] == pytest.approx(want, rel=1e-4)
