"""Behaviour log-probs as an honest bf16 sampler reports them, for the spot-check tolerance tests and bench: the
logits of the same weights rounded through bf16 (what a bf16 HF or vLLM engine samples from), optionally the
whole forward in bf16, optionally at a larger logit scale. And what the spot-check tests share: a learner loop
whose version 0 is the engine's weights (`checked_loop`) and a mismatch that passes (`CLEAN`)."""

from __future__ import annotations

import copy

import torch

from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.learner.mismatch import Mismatch
from swarmnode.model.logprobs import _prepare
from swarmnode.model.models import load_model

CLEAN = Mismatch(10, 0.0, 0.0, 0.0, 0, 0.0, 0.0, None)


def bf16_logprobs(
    model,
    prompt_tokens: list[int],
    completions: list[list[int]],
    temperature: float,
    pad_id: int,
    whole_forward: bool = False,
    logit_scale: float = 1.0,
    bf16_model=None,
) -> tuple[list[list[float]], list[list[float]]]:
    """(bf16-like claimed log-probs, fp32 reference log-probs) per completion, each at `logit_scale` x the
    model's logits; `whole_forward` runs the claims' forward in `bf16_model` (default: a bf16 copy of `model`)."""
    net = (bf16_model or copy.deepcopy(model).to(torch.bfloat16)) if whole_forward else model
    prompts = [prompt_tokens] * len(completions)
    ids, attn, position_ids, mask, T, temps, _ = _prepare(model, prompts, completions, temperature, pad_id)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=attn, position_ids=position_ids, use_cache=False).logits
        low = net(input_ids=ids, attention_mask=attn, position_ids=position_ids, use_cache=False).logits
    out = []
    for logits in (low.to(torch.bfloat16), ref.float()):
        scaled = (logits.float() * logit_scale).to(logits.dtype).float()[:, -(T + 1) : -1] / temps.view(-1, 1, 1)
        logp = torch.log_softmax(scaled, dim=-1).gather(-1, ids[:, -T:].unsqueeze(-1)).squeeze(-1)
        out.append([row[: len(c)].tolist() for row, c in zip(logp, completions)])
    return out[0], out[1]


def checked_loop(cfg, parts, lora: bool = False) -> LearnerLoop:
    """A learner loop (under LoRA with `lora`) whose version 0, published, is the weights `parts`' engine samples
    with."""
    task, tokenizer, engine = parts
    c = cfg
    if lora:
        c = cfg.model_copy(
            update={
                "learner": cfg.learner.model_copy(
                    update={"lora": cfg.learner.lora.model_copy(update=dict(enabled=True, r=4, alpha=8.0))}
                )
            }
        )
    model = load_model(c.model, c.task, "cpu")
    model.load_state_dict(engine.model.state_dict())  # the weights the engine samples with are version 0
    loop = LearnerLoop(model, tokenizer, task, c, ReplayBuffer.from_config(c), publish=lambda *a: None)
    loop.publish_current()
    return loop
