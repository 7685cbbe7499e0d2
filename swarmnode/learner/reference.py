"""The frozen reference policy of TRL's `beta` KL: the learner's starting weights, kept in the model's dtype as TRL
keeps its reference model (under LoRA, the base model with its adapters switched off, so no copy is kept)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager

import torch

from swarmnode.learner.lora import is_lora
from swarmnode.model.logprobs import completion_scores


def frozen_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """An eval-mode copy of `model` without gradients whose floating-point tensors are in `dtype`, built tensor by
    tensor (never a full copy in the training dtype first: fp32 master weights are not duplicated on the way)."""
    memo: dict[int, object] = {}
    for p in model.parameters():
        if id(p) not in memo:
            memo[id(p)] = torch.nn.Parameter(
                p.detach().to(dtype if p.is_floating_point() else p.dtype, copy=True), requires_grad=False
            )
    for b in model.buffers():
        if id(b) not in memo:
            memo[id(b)] = b.detach().to(dtype if b.is_floating_point() else b.dtype, copy=True)
    return copy.deepcopy(model, memo).eval().requires_grad_(False)


class ReferencePolicy:
    """Log-probs of completions under the weights the learner started from; a copy of the model in `dtype` (the
    model's configured dtype) unless it is a LoRA model (then its base, adapters off)."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype = torch.float32):
        self._lora = is_lora(model)
        self.model = model if self._lora else frozen_copy(model, dtype)

    @torch.no_grad()
    def logprobs(
        self,
        prompts: list[list[int]],
        completions: list[list[int]],
        temperatures: list[float],
        pad_id: int,
        autocast: Callable[[], ContextManager],
    ) -> torch.Tensor:
        """[B, T] reference log-probs (0 on padding), computed in the learner's precision."""
        off = self.model.disable_adapter() if self._lora else contextlib.nullcontext()
        with off, autocast():
            return completion_scores(self.model, prompts, completions, temperatures, pad_id).logp.float()
