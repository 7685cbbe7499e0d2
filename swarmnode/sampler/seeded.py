"""Seeded sampling in transformers' `generate`: a logits processor that draws each row's next token by inverse CDF
from its seeded uniform (`swarmnode.model.draws`) and leaves only that token, so greedy decoding takes it.

`generate` runs greedy (`do_sample=False`) with this processor last: the raw logits (`output_logits`) still give
the behaviour log-probs, and the tokens are the draws a learner replays from its own logits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import LogitsProcessor

from swarmnode.errors import UsageError
from swarmnode.model.draws import completion_seeds, draw_tokens, uniforms


class SeededDraw(LogitsProcessor):
    """Row r's token at completion position t is `draw_tokens(logits / T, u(seed_r, t))`; `width` is the padded
    prompt width (the first completion position's column)."""

    def __init__(self, row_seeds: list[int], width: int, temperature: float, device: torch.device):
        self.seeds = torch.tensor(row_seeds, dtype=torch.long, device=device)
        self.width, self.temperature = width, temperature

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        position = torch.full_like(self.seeds, input_ids.shape[1] - self.width)
        picked = draw_tokens(scores.float() / self.temperature, uniforms(self.seeds, position))
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, picked[:, None].to(out.device), 0.0)  # type: ignore[return-value]


def row_seeds(group_seeds: list[int], generations: int) -> list[int]:
    """The seeds of a batch's rows, prompt by prompt and completion by completion (prompts x G rows)."""
    return [s for seed in group_seeds for s in completion_seeds(seed, generations)]


def unreplayed_line(cfg: Any, engine: Any, emit: Callable[[str], None]) -> None:
    """Before `ready`: a sampler of seeded groups on an engine that cannot draw them replayably (vLLM) says so in
    one line when the run accepts such groups (`trust.accept_unreplayed`), and refuses to start (UsageError, one
    line) when it does not."""
    if not cfg.trust.seeded_groups or cfg.mode == "sapo" or engine.replayable:
        return
    name = cfg.sampler.engine
    if not cfg.trust.accept_unreplayed:
        raise UsageError(
            f"sampler.engine {name} cannot draw seeded samples a learner replays, and this run refuses groups "
            "whose draws are not replayable (trust.accept_unreplayed false): use sampler.engine hf"
        )
    emit(
        f"sampler engine {name} draws its own tokens: its groups are marked unreplayed (their prompts and counters "
        "are seeded; their tokens are checked by the log-prob and typicality checks only)"
    )
