"""The frozen reference policy of TRL's `beta` KL: the learner's starting weights (under LoRA, the base model with
its adapters switched off, so no copy is kept)."""

from __future__ import annotations

import contextlib
import copy
from typing import Callable, ContextManager

import torch

from swarmnode.learner.lora import is_lora
from swarmnode.model.logprobs import completion_scores


class ReferencePolicy:
    """Log-probs of completions under the weights the learner started from; a full copy of the model unless it
    is a LoRA model (then its base, adapters off)."""

    def __init__(self, model: torch.nn.Module):
        self._lora = is_lora(model)
        self.model = model if self._lora else copy.deepcopy(model).eval().requires_grad_(False)

    @torch.no_grad()
    def logprobs(self, prompts: list[list[int]], completions: list[list[int]], temperatures: list[float],
                 pad_id: int, autocast: Callable[[], ContextManager]) -> torch.Tensor:
        """[B, T] reference log-probs (0 on padding), computed in the learner's precision."""
        off = self.model.disable_adapter() if self._lora else contextlib.nullcontext()
        with off, autocast():
            return completion_scores(self.model, prompts, completions, temperatures, pad_id).logp.float()
