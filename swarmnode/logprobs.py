"""Per-token log-probs of completions under a causal LM, from temperature-scaled logits.

Layout: prompts are left-padded so every prompt ends at the same column P, completions are right-padded after
it, and position ids count only real tokens (cumsum of the attention mask), exactly what HF `generate` does
with a left-padded batch. The logits of the last T+1 positions are all that is computed (`logits_to_keep`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_batch(
    prompt_tokens: list[list[int]], completions: list[list[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(input_ids [B, P+T], attention_mask [B, P+T], completion mask [B, T], T) for the layout above."""
    if len(prompt_tokens) != len(completions) or not prompt_tokens:
        raise ValueError(f"need one prompt per completion (got {len(prompt_tokens)} and {len(completions)})")
    if any(not p for p in prompt_tokens):
        raise ValueError("every prompt needs at least one token")
    P = max(len(p) for p in prompt_tokens)
    T = max(1, max(len(c) for c in completions))
    B = len(prompt_tokens)
    ids = torch.full((B, P + T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + T), dtype=torch.long)
    comp_mask = torch.zeros((B, T), dtype=torch.bool)
    for i, (p, c) in enumerate(zip(prompt_tokens, completions)):
        ids[i, P - len(p) : P] = torch.as_tensor(p, dtype=torch.long)
        ids[i, P : P + len(c)] = torch.as_tensor(c, dtype=torch.long)
        attn[i, P - len(p) : P + len(c)] = 1
        comp_mask[i, : len(c)] = True
    return ids, attn, comp_mask, T


def completion_logprobs(
    model,
    prompt_tokens: list[list[int]],
    completions: list[list[int]],
    temperature: float | Sequence[float],
    pad_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp [B, T] float32 with grad, mask [B, T] bool) of each completion token given its prompt.

    `temperature` is one value or one per row (rows sampled at different temperatures can share a batch).
    Padding positions hold 0 in `logp` and False in `mask`; the EOS token, when a completion has one, is an
    ordinary completion token and inside the mask.
    """
    device = next(model.parameters()).device
    ids, attn, mask, T = pad_batch(prompt_tokens, completions, pad_id)
    temps = torch.as_tensor(temperature, dtype=torch.float32).reshape(-1)
    if temps.numel() not in (1, ids.shape[0]) or not bool((temps > 0).all()):
        raise ValueError(f"temperature must be > 0, one value or one per row (got {temperature})")
    ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
    position_ids = (attn.cumsum(dim=1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=attn, position_ids=position_ids, logits_to_keep=T + 1, use_cache=False)
    logits = out.logits[:, :-1, :].float() / temps.to(device).view(-1, 1, 1)  # position P-1+t predicts completion token t
    targets = ids[:, -T:]
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    logp = picked - torch.logsumexp(logits, dim=-1)
    return torch.where(mask, logp, torch.zeros_like(logp)), mask


def behaviour_mismatch(model, generations, temperature: float, pad_id: int) -> tuple[float, float]:
    """(mean, max) |behaviour log-prob - learner forward log-prob| per completion token.

    `generations` are engine outputs (`prompt_tokens`, `completions`, `logprobs`): the gap GEPO's weights see
    between what the sampler reported and what the learner recomputes for the same tokens.
    """
    prompts = [g.prompt_tokens for g in generations for _ in g.completions]
    completions = [c for g in generations for c in g.completions]
    with torch.no_grad():
        logp, mask = completion_logprobs(model, prompts, completions, temperature, pad_id)
    behaviour = torch.zeros_like(logp)
    for i, lp in enumerate(lp for g in generations for lp in g.logprobs):
        behaviour[i, : len(lp)] = torch.tensor(lp)
    diff = (logp - behaviour).abs()[mask]
    return diff.mean().item(), diff.max().item()
