"""LoRA learner (peft): adapters train and nothing else; the checkpoint holds and restores adapters and schedule;
the merged weights reproduce the learner's log-probs in a plain model; adapter size on Qwen3-0.6B. (Adapter-only
versions in the samplers and the swarm: test_adapter_versions.py.)"""

from __future__ import annotations

import pytest
import torch
from learner_helpers import sampled_groups
from lora_helpers import LORA, cfg, lora_loop, parts, train_steps  # noqa: F401  (module fixtures)

from swarmnode.config import load_config
from swarmnode.learner.checkpoint import CheckpointError
from swarmnode.learner.memory import ModelShape, lora_parameters
from swarmnode.learner.verify import swapped
from swarmnode.model.logprobs import completion_scores, full_logits_scores
from swarmnode.model.models import KNOWN_ARCHITECTURES, estimate_parameters, load_model


def test_lora_trains_adapters_and_publishes_weights_a_plain_model_reproduces(cfg, parts):
    groups = sampled_groups(cfg, parts, 3)
    loop = lora_loop(cfg, parts)
    base = load_model(cfg.model, cfg.task, "cpu")
    trainable = {n for n, p in loop.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    train_steps(loop, groups)
    assert all(
        torch.equal(p, base.state_dict()[k])
        for k, p in loop.model.get_base_model().state_dict().items()
        if "lora_" not in k and ".base_layer." not in k
    )  # frozen weights did not move
    adapters = loop.adapter_snapshot()
    assert adapters and all("lora_" in k for k in adapters)
    assert any(float(v.abs().max()) > 0 for k, v in adapters.items() if "lora_B" in k)  # B starts at 0
    published = loop.state_snapshot()
    assert published.keys() == base.state_dict().keys()
    plain = load_model(cfg.model, cfg.task, "cpu")
    plain.load_state_dict(published)
    g = groups[0]
    prompts, comps = [g.prompt_tokens] * len(g.completions), g.completions
    with torch.no_grad():
        learner = completion_scores(loop.model, prompts, comps, 1.0, 0)
        reference = full_logits_scores(loop.model, prompts, comps, 1.0, 0)
        sampler = completion_scores(plain, prompts, comps, 1.0, 0)
        before = completion_scores(base, prompts, comps, 1.0, 0)
    m = learner.mask
    assert (learner.logp - reference.logp)[m].abs().max() < 1e-5  # chunked path through peft = full logits
    assert (learner.logp - sampler.logp)[m].abs().max() < 1e-5  # behaviour gap after applying the version
    assert (learner.logp - before.logp)[m].abs().max() > 1e-3  # and the version changed the outputs
    # the spot checker re-scores an older version by swapping its adapters into the live model and back
    with torch.no_grad():
        loop.model.load_state_dict(
            {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in loop.model.state_dict().items()}
        )  # now the base's outputs
        with swapped(loop.model, adapters):
            again = completion_scores(loop.model, prompts, comps, 1.0, 0)
        after = completion_scores(loop.model, prompts, comps, 1.0, 0)
    assert (again.logp - learner.logp)[m].abs().max() < 1e-5
    assert (after.logp - before.logp)[m].abs().max() < 1e-5  # the live adapters came back


def test_restart_resumes_adapters_and_schedule(cfg, parts, tmp_path):
    groups = sampled_groups(cfg, parts, 3)
    settings = dict(warmup_steps=10, checkpoint_every=1)
    loop = lora_loop(cfg, parts, tmp_path, **settings)
    train_steps(loop, groups)
    loop.save()
    resumed = lora_loop(cfg, parts, tmp_path, **settings)
    assert resumed.resumed and resumed.step_count == 3
    saved, restored = loop.adapter_snapshot(), resumed.adapter_snapshot()
    assert saved.keys() == restored.keys() and all(torch.equal(saved[k], restored[k]) for k in saved)
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(loop.optimizer.param_groups[0]["lr"])
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(cfg.learner.learning_rate * 3 / 10)
    with pytest.raises(CheckpointError, match="lora"):
        lora_loop(cfg, parts, tmp_path, lora=dict(enabled=False), **settings)


def test_qwen3_0_6b_adapters_at_r16_are_under_2_percent_of_the_weights():
    """Real Qwen3-0.6B shapes (on the meta device: no memory, no download), peft's own adapter count."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hf = Qwen3Config(**KNOWN_ARCHITECTURES["Qwen/Qwen3-0.6B"])
    settings = load_config("tiny-cpu").learner.lora
    with torch.device("meta"):
        model = Qwen3ForCausalLM(hf)
    full = sum(p.numel() for p in model.parameters())
    wrapped = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=settings.target_modules))
    adapters = sum(p.numel() for n, p in wrapped.named_parameters() if "lora_" in n)
    assert adapters == lora_parameters(ModelShape.from_hf_config(hf, full), 16, settings.target_modules)
    assert full == pytest.approx(estimate_parameters(hf), rel=1e-4)  # the estimate omits q/k norms
    assert adapters / full < 0.02  # same dtype for both: the byte ratio is the parameter ratio
