"""Random-weight models of a config's shape and synthetic rows for the self-check (nothing downloaded)."""

from __future__ import annotations

import torch

from swarmnode.config import ModelConfig
from swarmnode.model.models import _dtype, model_architecture


def random_model(mc: ModelConfig, device: torch.device, dtype: torch.dtype | None = None, seed: int = 0):
    """A causal LM of the configured model's architecture with random weights, on `device` in `dtype`
    (default `model.dtype`), activation checkpointing as configured."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    arch = model_architecture(mc)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(arch, dtype=dtype or _dtype(mc.dtype))
    if mc.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model


def random_rows(
    rows: int, prompt_len: int, completion_len: int, vocab: int, seed: int = 1
) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, completions): `rows` random token sequences of the given lengths (ids below `vocab`)."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(0, vocab, (rows, prompt_len), generator=g).tolist()
    completions = torch.randint(0, vocab, (rows, completion_len), generator=g).tolist()
    return prompts, completions


def vocab_size(model) -> int:
    return int(model.config.vocab_size)
