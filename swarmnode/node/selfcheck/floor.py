"""The bf16 log-prob floor: how far an honest bf16 sampler's log-probs sit from the learner's, same weights.

Completions are sampled from the model itself (so log-probs sit where real ones do); the learner's per-token
log-probs are its chunked path (fp32 output; under bf16 autocast on a GPU, as it trains) and the sampler's are
a log-softmax of bf16 logits from a bf16 copy of the weights (what a bf16 HF or vLLM sampler samples from).
Reported per token (mean, median, p99, max) and per group (the median over a group's tokens, what the spot
check's statistic reads: `learner.verify`).
"""

from __future__ import annotations

import contextlib
import copy

import torch

from swarmnode.config import NodeConfig
from swarmnode.model.logprobs import completion_scores, full_logits_scores

PROMPTS, GENERATIONS, PROMPT_TOKENS, NEW_TOKENS = 4, 8, 32, 64


def bf16_floor(model, device: torch.device, learner_autocast: bool, seed: int = 0) -> dict:
    """Per-token and per-group |learner log p - bf16 sampler log p| on completions `model` samples itself."""
    torch.manual_seed(seed)
    model = model.float().eval()
    vocab = int(model.config.vocab_size)
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(0, vocab, (PROMPTS, PROMPT_TOKENS), generator=g).to(device)
    sampler = copy.deepcopy(model).to(torch.bfloat16)
    with torch.no_grad():
        out = sampler.generate(
            input_ids=prompt_ids,
            attention_mask=torch.ones_like(prompt_ids),
            do_sample=True,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            num_return_sequences=GENERATIONS,
            pad_token_id=0,
        )
        completions = out[:, PROMPT_TOKENS:].tolist()
        prompts = [row for row in prompt_ids.tolist() for _ in range(GENERATIONS)]
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if learner_autocast else contextlib.nullcontext()
        with autocast:
            learner = completion_scores(model, prompts, completions, 1.0, 0)
        behaviour = full_logits_scores(sampler, prompts, completions, 1.0, 0)
    del sampler
    diff = (learner.logp - behaviour.logp).abs()
    tokens = diff[learner.mask].float().cpu()
    per_row = [d[m].float().cpu() for d, m in zip(diff, learner.mask)]
    per_group = torch.stack(
        [torch.cat(per_row[i : i + GENERATIONS]).median() for i in range(0, len(per_row), GENERATIONS)]
    )
    return {
        "tokens": int(tokens.numel()),
        "token_mean": float(tokens.mean()),
        "token_median": float(tokens.median()),
        "token_p99": float(tokens.quantile(0.99)),
        "token_max": float(tokens.max()),
        "group_median_max": float(per_group.max()),
        "learner": "bf16 autocast, fp32 log-probs" if learner_autocast else "fp32",
    }


def floor_for(cfg: NodeConfig, device: torch.device) -> dict:
    """`bf16_floor` on the configured model (its own weights where at hand, else random weights of its shape)."""
    from swarmnode.node.selfcheck.generation import weights_at_hand
    from swarmnode.node.selfcheck.weights import random_model

    if weights_at_hand(cfg.model):
        from swarmnode.model.models import load_model

        model, weights = load_model(cfg.model, cfg.task, device), "model's own"
    else:
        model, weights = random_model(cfg.model, device, dtype=torch.float32), "random, model's shape"
    result = bf16_floor(model, device, learner_autocast=device.type == "cuda")
    return {**result, "weights": weights}
