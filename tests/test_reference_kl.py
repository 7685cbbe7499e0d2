"""TRL's `beta`: a KL to the learner's starting weights (a frozen copy; under LoRA the base, adapters off)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from test_learner_loop import FAST, make_loop, sampled_groups

from swarmnode.config import LoraSettings, load_config
from swarmnode.learner.lora import apply_lora
from swarmnode.learner.reference import ReferencePolicy
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.sampler.engines import build_engine
from swarmnode.tasks import build_task


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST + ["sampler.temperature=1.3", "learner.prompts_per_step=8",
                                       "trust.verify_fraction=0"])  # about the reference KL, not spot checks


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
