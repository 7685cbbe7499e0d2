"""Settings that load but are probably not what the user wants: a warning each (once per process); and the
learning rate a config gets when it sets none, by the model it trains.

Learning rates (AdamW), when `learner.learning_rate` is not set: 1e-6 for full fine-tuning of a pretrained model
(TRL's GRPO default and the GEPO paper's), 1e-5 under LoRA (adapters need about ten times more), 1e-3 for the
built-in tiny model (a 100k-parameter model trained from a short warm start: bench/tiny-learning-rate). A set value
far outside the usual range of its kind is warned about: full fine-tuning of a pretrained model above 1e-4 (TRL's
recipes train at 1e-7..1e-5) and LoRA outside 5e-6..1e-3.
"""

from __future__ import annotations

from swarmnode.config.compat import warn_once

LORA_MIN_LEARNING_RATE = 5e-6  # LoRA usually trains at ~1e-5..1e-4; 1e-6 is a full fine-tune's rate
LORA_MAX_LEARNING_RATE = 1e-3
FULL_MAX_LEARNING_RATE = 1e-4  # full fine-tuning of a pretrained LLM: ~1e-7..1e-5 (TRL's GRPO default 1e-6)
DEFAULT_LEARNING_RATE = {"full": 1e-6, "lora": 1e-5, "tiny": 1e-3}
TINY_MODELS = ("builtin:tiny",)  # trained from scratch-like warm starts: no range applies


def learning_rate_kind(model_name: str, lora_enabled: bool) -> str:
    """ "tiny", "lora" or "full": which learning-rate range a model and training mode call for."""
    if model_name in TINY_MODELS:
        return "tiny"
    return "lora" if lora_enabled else "full"


def warn_lora_learning_rate(lora_enabled: bool, learning_rate: float) -> bool:
    """Warn when LoRA trains at a full fine-tune's learning rate (adapters then barely move). True if warned."""
    if lora_enabled and learning_rate < LORA_MIN_LEARNING_RATE:
        warn_once(
            "lora_lr",
            f"learner.lora.enabled with learner.learning_rate={learning_rate:g}: that is a full "
            f"fine-tune's rate; LoRA usually needs about ten times more (e.g. 1e-5, as the qwen3-*-lora "
            "presets)",
        )
        return True
    return False


def warn_far_learning_rate(kind: str, learning_rate: float) -> bool:
    """Warn when a set learning rate is far above its kind's usual range (a pretrained model's weights would be
    wrecked in a few steps). True if warned."""
    if kind == "full" and learning_rate > FULL_MAX_LEARNING_RATE:
        warn_once(
            "full_lr",
            f"learner.learning_rate={learning_rate:g} for full fine-tuning of a pretrained model: "
            f"far above the usual 1e-7..1e-5 (TRL's GRPO default and the GEPO paper: 1e-6); above "
            f"{FULL_MAX_LEARNING_RATE:g} a few steps can wreck the model",
        )
        return True
    if kind == "lora" and learning_rate > LORA_MAX_LEARNING_RATE:
        warn_once(
            "lora_lr_high",
            f"learner.learning_rate={learning_rate:g} under LoRA: above the usual "
            f"1e-5..1e-4 by more than ten times (the qwen3-*-lora presets: 1e-5)",
        )
        return True
    return False
