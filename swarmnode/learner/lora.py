"""LoRA through peft: wrap the policy so that only low-rank adapters train, and move adapter tensors in and out.

`learner.lora` (rank, alpha, dropout, target modules) becomes a peft `LoraConfig`; the base model's weights are
frozen. `adapter_state` (from `swarmnode.model.adapters`) is what the checkpoint and an adapter-only version carry: the
adapter tensors alone, peft's own key names; `load_adapter_state` puts them back; `adapter_spec` is what an
adapter-only version's manifest says about them (base weights' hash, rank, alpha, targets). `merged_state` folds
the adapters into full weights under the plain model's names, which a plain model loads. The output head is
never adapted, so the chunked log-prob path (a plain linear head) applies unchanged.
"""

from __future__ import annotations

import torch

from swarmnode.config import LoraSettings
from swarmnode.model.adapters import adapter_state, load_adapter_state
from swarmnode.protocol.manifest import AdapterSpec

__all__ = ["adapter_spec", "adapter_state", "apply_lora", "is_lora", "load_adapter_state", "merged_state"]


def apply_lora(model: torch.nn.Module, settings: LoraSettings, seed: int = 0) -> torch.nn.Module:
    """`model` wrapped by peft with fresh adapters (B = 0: the wrapped model computes what the base does). The
    random A matrices are drawn from `seed` (the global RNG is left as it was): every learner of a run starts from
    the same adapters, so several averaging learners publish the same version 0 and average from one start."""
    from peft import LoraConfig, get_peft_model

    if "lm_head" in settings.target_modules:
        raise ValueError("learner.lora.target_modules: lm_head cannot be adapted (the log-prob path reads its weight)")
    config = LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            wrapped = get_peft_model(model, config)
    except ValueError as exc:  # e.g. no module matches the target names
        raise ValueError(f"learner.lora: {str(exc).splitlines()[0]}") from None
    if getattr(model, "is_activation_checkpointing", None) or getattr(model, "gradient_checkpointing", False):
        wrapped.enable_input_require_grads()  # checkpointed layers need a grad-requiring input when embeddings freeze
    return wrapped


def adapter_spec(settings: LoraSettings, base_hash: bytes) -> AdapterSpec:
    """The manifest's description of adapters trained with `settings` on the base weights hashing to `base_hash`."""
    return AdapterSpec(base_hash, settings.r, float(settings.alpha), tuple(settings.target_modules))


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def merged_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The plain model's state dict with every adapter folded in (W + alpha / r * B A), detached."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    deltas = {
        f"{name}.weight": module.get_delta_weight(module.active_adapters[0])
        for name, module in base.named_modules()
        if isinstance(module, LoraLayer)
    }
    out = {}
    for key, value in base.state_dict().items():
        if ".lora_" in key:
            continue
        plain = key.replace(".base_layer.", ".")
        out[plain] = (value + deltas[plain].to(value.dtype)).detach() if plain in deltas else value.detach()
    return out
