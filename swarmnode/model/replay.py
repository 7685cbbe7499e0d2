"""A spot check's one pass over a group: per completion token its log-prob and entropy (as `completion_scores`)
and the probability the vocabulary puts below it (in id order), from the same logits, without [B, T, V] logits.

With those a learner replays a seeded draw (`swarmnode.model.draws`): token t of completion j was drawn from the
uniform u = u(seed_j, t) exactly when below < u <= below + p(token). `draw_gaps` measures by how much u falls
outside that interval (0 inside it), so an engine whose logits differ slightly from the learner's is judged with
a tolerance (`learner.draw_check`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from swarmnode.model.draws import uniforms
from swarmnode.model.logprobs import (
    TOKEN_CHUNK,
    VOCAB_CHUNK,
    CompletionScores,
    _plain_linear_head,
    _prepare,
    online_tiles,
)


@dataclass
class ReplayScores(CompletionScores):
    """`CompletionScores` plus, per completion token, the probability of the tokens below it ([B, T])."""

    below: torch.Tensor | None = None


@torch.no_grad()
def replay_scores(
    model,
    prompt_tokens: list[list[int]],
    completions: list[list[int]],
    temperature: float | Sequence[float],
    pad_id: int,
    token_chunk: int = TOKEN_CHUNK,
    vocab_chunk: int = VOCAB_CHUNK,
) -> ReplayScores:
    """Log-probs, entropies and the probability below each completion token, one decoder pass and one tile loop."""
    ids, attn, position_ids, mask, T, temps, where = _prepare(model, prompt_tokens, completions, temperature, pad_id)
    head = _plain_linear_head(model)
    targets = ids[:, -T:][where]
    if head is None:  # a head that is not a plain linear layer: its full logits
        out = model(input_ids=ids, attention_mask=attn, position_ids=position_ids, logits_to_keep=T + 1)
        logits = out.logits[:, :-1, :][where].float() / temps[where[0]][:, None]
        values = _from_logits(logits, targets)
    else:
        out = model.get_decoder()(input_ids=ids, attention_mask=attn, position_ids=position_ids, use_cache=False)
        hidden = out.last_hidden_state[:, -(T + 1) : -1][where]
        values = _tiles(hidden, head.weight, head.bias, targets, 1.0 / temps[where[0]], token_chunk, vocab_chunk)
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    logp, entropy, below = (zeros.index_put(where, v) for v in values)
    return ReplayScores(logp, mask, entropy, where, below=below)


def _from_logits(z: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    log_p = torch.log_softmax(z, dim=-1)
    p = log_p.exp()
    cols = torch.arange(z.shape[1], device=z.device)
    below = (p * (cols[None, :] < targets[:, None])).sum(dim=1)
    return log_p.gather(1, targets[:, None]).squeeze(1), -(p * log_p).sum(dim=1), below


def _tiles(hidden, weight, bias, targets, inv_temp, token_chunk: int, vocab_chunk: int):
    """(log p(target), entropy, probability below target) per row, tile by tile (`logprobs.online_tiles`)."""
    logp, entropy, _, _, below = online_tiles(
        hidden, weight, bias, targets, inv_temp, token_chunk, vocab_chunk, below=True
    )
    return logp, entropy, below


def draw_gaps(scores: ReplayScores, seeds: list[int]) -> torch.Tensor:
    """[B, T] how far (in probability) each token's seeded uniform lies outside its interval (0 inside; 0 at
    padding); `seeds`: each completion's draw seed (`draws.completion_seeds`)."""
    rows, cols = scores.where if scores.where is not None else scores.mask.nonzero(as_tuple=True)
    device = scores.logp.device
    u = uniforms(torch.tensor(seeds, dtype=torch.long, device=device)[rows], cols.to(device))
    assert scores.below is not None
    lo = scores.below[rows, cols].double()
    hi = lo + scores.logp[rows, cols].double().exp()
    gap = torch.clamp(torch.maximum(lo - u, u - hi), min=0.0).float()
    return torch.zeros(scores.mask.shape, dtype=torch.float32, device=device).index_put((rows, cols), gap)
