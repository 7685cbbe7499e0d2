"""Settings that load but are probably not what the user wants: a warning each (once per process)."""

from __future__ import annotations

from swarmnode.config.compat import warn_once

LORA_MIN_LEARNING_RATE = 5e-6  # LoRA usually trains at ~1e-5..1e-4; 1e-6 is a full fine-tune's rate


def warn_lora_learning_rate(lora_enabled: bool, learning_rate: float) -> bool:
    """Warn when LoRA trains at a full fine-tune's learning rate (adapters then barely move). True if warned."""
    if lora_enabled and learning_rate < LORA_MIN_LEARNING_RATE:
        warn_once("lora_lr", f"learner.lora.enabled with learner.learning_rate={learning_rate:g}: that is a full "
                   f"fine-tune's rate; LoRA usually needs about ten times more (e.g. 1e-5, as the qwen3-*-lora "
                   "presets)")
        return True
    return False
