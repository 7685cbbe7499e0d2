"""Does fp16 training get the gradient fp32 gets? The same batch's gradient under fp16 autocast, with the
learner's loss scaler and without one, against fp32 (cosine, entries that fp16 silently zeroes, tensors that get
no gradient at all). Cards without bf16 (T4, V100, GTX/RTX 20-series) train in fp16."""

from __future__ import annotations

import torch

from swarmnode.config import NodeConfig
from swarmnode.learner.precision import Precision
from swarmnode.node.selfcheck.step import step_loss
from swarmnode.node.selfcheck.weights import random_model, random_rows, vocab_size

ROWS, PROMPT, COMPLETION = 8, 32, 64


def fp16_gradients(cfg: NodeConfig, device: torch.device, model=None) -> dict:
    """{'scaled': ..., 'unscaled': ...}: each a comparison of the fp16-autocast gradient with fp32's
    (see `compare`), on a random-weight model of the config's shape (or `model`, trained in place: none)."""
    model = model if model is not None else random_model(cfg.model, device, dtype=torch.float32)
    if cfg.learner.lora.enabled and not hasattr(model, "peft_config"):
        from swarmnode.learner.lora import apply_lora

        model = apply_lora(model, cfg.learner.lora, seed=0)
        _perturb_lora_b(model)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    for _, p in params:
        p.data = p.data.float()
    prompts, completions = random_rows(ROWS, PROMPT, COMPLETION, vocab_size(model))
    group = (torch.arange(ROWS) // 4).to(device)
    fp32 = Precision(torch.float32, None, torch.float32, device.type)
    reference = _gradients(model, params, fp32, prompts, completions, group, cfg)
    scaled = Precision.with_autocast(torch.float16, torch.float16, device.type)
    plain = Precision(torch.float32, torch.float16, torch.float16, device.type)
    return {
        "scaled": compare(reference, _gradients(model, params, scaled, prompts, completions, group, cfg)),
        "unscaled": compare(reference, _gradients(model, params, plain, prompts, completions, group, cfg)),
    }


def _perturb_lora_b(model) -> None:
    """LoRA's B starts at zero, so A gets no gradient on the first step; a small B makes every adapter count."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and "lora_B" in name:
                p.copy_((torch.randn(p.shape, generator=g) * 1e-3).to(p.device, p.dtype))


def _gradients(
    model, params, precision: Precision, prompts, completions, group, cfg: NodeConfig
) -> list[torch.Tensor | None]:
    model.train()
    optimizer = torch.optim.SGD([p for _, p in params], lr=0.0)  # the scaler unscales through an optimizer
    optimizer.zero_grad(set_to_none=True)
    precision.backward(step_loss(model, precision, prompts, completions, group, cfg))
    precision.unscale(optimizer)
    grads = [None if p.grad is None else p.grad.detach().float().clone() for _, p in params]
    optimizer.zero_grad(set_to_none=True)
    return grads


def compare(reference: list[torch.Tensor | None], other: list[torch.Tensor | None]) -> dict:
    """cosine of the flattened gradients, the fraction of entries non-zero in `reference` but exactly zero in
    `other`, and how many tensors with a reference gradient got none (or only zeros) in `other`."""
    ref_parts, oth_parts, dead = [], [], 0
    for r, o in zip(reference, other):
        if r is None:
            continue
        if o is None or not bool(o.any()):
            dead += int(bool(r.any()))
        o = torch.zeros_like(r) if o is None else o
        ref_parts.append(r.flatten())
        oth_parts.append(o.flatten())
    ref, oth = torch.cat(ref_parts), torch.cat(oth_parts)
    finite = bool(torch.isfinite(oth).all())
    nonzero = ref != 0
    zeroed = float(((oth == 0) & nonzero).sum()) / max(1, int(nonzero.sum()))
    cosine = float(torch.nn.functional.cosine_similarity(ref, oth, dim=0)) if finite else float("nan")
    return {
        "cosine": cosine,
        "zeroed_fraction": zeroed,
        "tensors_without_gradient": dead,
        "tensors": len(ref_parts),
        "finite": finite,
    }
