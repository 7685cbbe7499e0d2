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
    _compute_dtype,
    _mm_fp32,
    _plain_linear_head,
    _prepare,
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
    """(log p(target), entropy, probability below target) per row, tile by tile (online logsumexp, as
    `ChunkedLMHeadLogProbs.forward`)."""
    cdt = _compute_dtype(hidden, weight)
    N, V, dev = hidden.shape[0], weight.shape[0], hidden.device
    running_max = torch.full((N,), float("-inf"), device=dev)
    sum_exp, sum_exp_z, sum_below = (torch.zeros(N, device=dev) for _ in range(3))
    target_z = torch.zeros(N, device=dev)
    with torch.autocast(dev.type, enabled=False):
        for t0 in range(0, N, token_chunk):
            rows = slice(t0, min(t0 + token_chunk, N))
            h = hidden[rows].to(cdt)
            for v0 in range(0, V, vocab_chunk):
                v1 = min(v0 + vocab_chunk, V)
                z = _mm_fp32(h, weight[v0:v1].to(cdt).t())
                if bias is not None:
                    z += bias[v0:v1].float()
                z *= inv_temp[rows, None].float()
                new_max = torch.maximum(running_max[rows], z.amax(dim=1))
                rescale = torch.exp(running_max[rows] - new_max)
                e = (z - new_max[:, None]).exp_()
                local = targets[rows] - v0
                cols = torch.arange(v1 - v0, device=dev)
                sum_below[rows] = sum_below[rows] * rescale + (e * (cols[None, :] < local[:, None])).sum(dim=1)
                sum_exp[rows] = sum_exp[rows] * rescale + e.sum(dim=1)
                sum_exp_z[rows] = sum_exp_z[rows] * rescale + torch.bmm(e[:, None, :], z[:, :, None]).view(-1)
                del e
                running_max[rows] = new_max
                inside = (local >= 0) & (local < v1 - v0)
                picked = z.gather(1, local.clamp(0, v1 - v0 - 1)[:, None]).squeeze(1)
                target_z[rows] = torch.where(inside, picked, target_z[rows])
    log_z = running_max + torch.log(sum_exp)
    return target_z - log_z, log_z - sum_exp_z / sum_exp, sum_below / sum_exp


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
