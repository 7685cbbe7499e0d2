"""TRL's `beta`: a KL to the learner's starting weights (a frozen copy; under LoRA the base, adapters off)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from learner_helpers import FAST, make_loop, sampled_groups
from loss_helpers import reference_loss

from swarmnode.config import LoraSettings, load_config
from swarmnode.learner.lora import apply_lora
from swarmnode.learner.reference import ReferencePolicy
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.sampler.build import build_engine
from swarmnode.tasks import build_task


@pytest.fixture(scope="module")
def cfg():
    return load_config(
        "tiny-cpu", FAST + ["sampler.temperature=1.3", "learner.prompts_per_step=8", "trust.verify_fraction=0"]
    )  # about the reference KL, not spot checks


@pytest.fixture(scope="module")
def parts(cfg):
    return build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)


def test_the_reference_kl_is_zero_at_the_start_and_grows_as_the_learner_moves(cfg, parts):
    loop = make_loop(cfg, parts, beta=0.1, learning_rate=1e-2)
    groups = sampled_groups(cfg, parts, 6)
    for g in groups:
        loop.buffer.add(g)
    diags = [d for d in iter(loop.step, None) if d["trained"]]
    assert len(diags) >= 2, "the sampled batches should give two trained steps"
    assert diags[0]["ref_kl"] == pytest.approx(0.0, abs=1e-6)  # the reference is the starting weights
    assert diags[-1]["ref_kl"] > 1e-6
    assert all(not p.requires_grad for p in loop.reference.model.parameters())


def test_under_lora_the_reference_is_the_base_with_adapters_off(cfg, parts):
    model = apply_lora(load_model(cfg.model, cfg.task), LoraSettings(enabled=True, r=4))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # the adapters now change the policy
    base = load_model(cfg.model, cfg.task)
    prompts, completions = [[5, 6, 7, 8]], [[9, 10, 11, 12]]
    ref = ReferencePolicy(model).logprobs(prompts, completions, [1.0], 0, contextlib.nullcontext)
    with torch.no_grad():
        want = completion_scores(base, prompts, completions, 1.0, 0).logp
        adapted = completion_scores(model, prompts, completions, 1.0, 0).logp
    assert torch.allclose(ref, want, atol=1e-5) and not torch.allclose(ref, adapted, atol=1e-3)


def test_with_beta_zero_signal_groups_keep_their_kl_and_their_place_in_the_mean(cfg, parts):
    """As TRL: with beta > 0 a group whose rewards are all equal has A = 0 but its reference KL still pulls, and its
    rows count in the loss's normaliser; the loop's gradient equals the formula's over every row of the step."""
    loop = make_loop(cfg, parts, beta=0.1, gradient_accumulation_steps=3)
    assert loop.trains_zero_signal
    with torch.no_grad():  # off the (frozen) reference: a non-zero KL term
        for p in loop.model.parameters():
            p.add_(0.05 * torch.sin(torch.arange(p.numel(), dtype=p.dtype)).reshape(p.shape))
    sampled = [(g, rows) for g in sampled_groups(cfg, parts, 2) if (rows := loop.rows.rows(g, loop.version))]
    groups = [rows for _, rows in sampled]
    signal = [len({r.reward for r in g}) > 1 for g in groups]
    assert any(signal) and not all(signal), "need groups with and without signal"
    loop.model.zero_grad(set_to_none=True)
    loop.accumulate_gradients(groups)
    got = {n: p.grad.clone() for n, p in loop.model.named_parameters() if p.grad is not None}

    rows = [r for g in groups for r in g]
    labels = [gi for gi, g in enumerate(groups) for _ in g]
    args = (
        [r.prompt_tokens for r in rows],
        [r.completion for r in rows],
        [r.temperature for r in rows],
        loop.tokenizer.pad_token_id,
    )
    loop.model.zero_grad(set_to_none=True)
    scores = completion_scores(loop.model, *args)
    logq = torch.zeros_like(scores.logp)
    for i, r in enumerate(rows):
        logq[i, : len(r.logq)] = torch.tensor(r.logq)
    ref = loop.reference.logprobs(*args, contextlib.nullcontext)
    want = reference_loss(
        loop.lc.algorithm,
        scores.logp,
        logq,
        scores.mask,
        torch.tensor([r.reward for r in rows]),
        labels,
        ref=ref,
        ref_coef=0.1,
    )
    want.backward()
    for name, p in loop.model.named_parameters():
        if p.grad is not None:
            assert (got[name] - p.grad).abs().max() <= 1e-5 * max(1.0, float(p.grad.abs().max())), name

    # a step of zero-signal groups alone still trains (its KL term), as in TRL
    for g in (g for (g, _), s in zip(sampled, signal) if not s):
        loop.buffer.add(g)
    loop.lc.prompts_per_step = len(loop.buffer)
    diag = loop.step()
    assert diag["trained"] == 1.0 and diag["zero_signal_fraction"] == 1.0 and diag["ref_kl"] > 0


def test_the_reference_is_kept_in_the_models_dtype(cfg, parts):
    c = cfg.model_copy(update={"model": cfg.model.model_copy(update={"dtype": "bfloat16"})})
    loop = make_loop(c, parts, beta=0.1)
    assert {p.dtype for p in loop.reference.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in loop.trainable} == {torch.float32}  # the master weights stay fp32
