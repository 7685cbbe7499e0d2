"""LoRA through peft: wrap the policy so that only low-rank adapters train, and move adapter tensors in and out.

`learner.lora` (rank, alpha, dropout, target modules) becomes a peft `LoraConfig`; the base model's weights are
frozen. `adapter_state` is what the checkpoint (and an adapter-only version) carries: the adapter tensors alone,
peft's own key names; `load_adapter_state` puts them back. `merged_state` folds the adapters into full weights
under the plain model's names, which any sampler loads like a full-weight version. The output head is never
adapted, so the chunked log-prob path (a plain linear head) applies unchanged.
"""

from __future__ import annotations

import torch

from swarmnode.config import LoraSettings


def apply_lora(model: torch.nn.Module, settings: LoraSettings) -> torch.nn.Module:
    """`model` wrapped by peft with fresh adapters (B = 0: the wrapped model computes what the base does)."""
    from peft import LoraConfig, get_peft_model

    if "lm_head" in settings.target_modules:
        raise ValueError("learner.lora.target_modules: lm_head cannot be adapted (the log-prob path reads its weight)")
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=list(settings.target_modules), bias="none", task_type="CAUSAL_LM")
    try:
        wrapped = get_peft_model(model, config)
    except ValueError as exc:  # e.g. no module matches the target names
        raise ValueError(f"learner.lora: {str(exc).splitlines()[0]}") from None
    if getattr(model, "is_activation_checkpointing", None) or getattr(model, "gradient_checkpointing", False):
        wrapped.enable_input_require_grads()  # checkpointed layers need a grad-requiring input when embeddings freeze
    return wrapped


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter tensors of a peft-wrapped model (detached, on their device)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach() for k, v in get_peft_model_state_dict(model).items()}


def load_adapter_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load adapter tensors saved by `adapter_state`; a missing or extra tensor is an error naming it."""
    from peft import set_peft_model_state_dict

    expected = set(adapter_state(model))
    if set(state) != expected:
        missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
        raise ValueError(f"adapter state does not fit this model (missing {missing[:3]}, unexpected {extra[:3]})")
    set_peft_model_state_dict(model, state)


def merged_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The plain model's state dict with every adapter folded in (W + alpha / r * B A), detached."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    deltas = {f"{name}.weight": module.get_delta_weight(module.active_adapters[0])
              for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    out = {}
    for key, value in base.state_dict().items():
        if ".lora_" in key:
            continue
        plain = key.replace(".base_layer.", ".")
        out[plain] = (value + deltas[plain].to(value.dtype)).detach() if plain in deltas else value.detach()
    return out
