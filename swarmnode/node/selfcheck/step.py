"""One learner step on a random-weight model of the config's shape: peak memory against the estimate, tokens/s.

The step is the learner's own arithmetic: the chunked log-prob path under the learner's precision, the configured
policy loss on rows of the largest micro-batch the config allows (full-length prompts and completions; with `beta`
> 0, TRL's reference model in model.dtype and its log-probs), backward
(scaled under fp16), clipping, the learner's AdamW. The first step allocates AdamW's state, so its peak is
compared with the estimator's first-step figure; tokens/s is taken from a second step.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time

import torch

from swarmnode.config import NodeConfig
from swarmnode.learner.losses import policy_loss
from swarmnode.learner.memory import ModelShape, micro_batch_rows_and_tokens, training_memory
from swarmnode.learner.optimizer import build_optimizer
from swarmnode.learner.precision import Precision
from swarmnode.learner.reference import ReferencePolicy
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.models import estimate_parameters, model_architecture
from swarmnode.node.selfcheck.weights import random_model, random_rows, vocab_size


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _PeakRss:
    """The process's peak resident memory while in the block, sampled every `interval` s on a thread (ru_maxrss
    cannot be reset, and the imports' high-water mark may already exceed a small model's step)."""

    def __init__(self, interval: float = 0.002):
        import psutil

        self.process, self.interval = psutil.Process(), interval
        self.before = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)

    @property
    def growth(self) -> int:
        return self.peak - self.before


def learner_step(cfg: NodeConfig, device: torch.device) -> dict:
    """Measure one learner step of `cfg`'s model shape on `device` (see the module docstring)."""
    arch = model_architecture(cfg.model)
    shape = ModelShape.from_hf_config(arch, estimate_parameters(arch))
    estimate = training_memory(shape, cfg, device.type)
    rows, tokens = micro_batch_rows_and_tokens(cfg.learner, cfg.sampler)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    rss = _PeakRss() if device.type != "cuda" else None
    with rss or contextlib.nullcontext():
        model = random_model(cfg.model, device)
        if cfg.learner.lora.enabled:
            from swarmnode.learner.lora import apply_lora

            model = apply_lora(model, cfg.learner.lora, seed=0)
        precision = Precision.from_config(cfg, device)
        precision.prepare(model)
        reference = ReferencePolicy(model, getattr(torch, cfg.model.dtype)) if cfg.learner.beta > 0 else None
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = build_optimizer(params, cfg.learner)
        prompts, completions = random_rows(
            rows, cfg.sampler.max_prompt_length, cfg.sampler.max_completion_length, vocab_size(model)
        )
        group = torch.arange(rows) // max(1, cfg.sampler.num_generations)
        seconds = []
        for _ in range(2):
            _synchronize(device)
            start = time.perf_counter()
            _one_step(model, precision, optimizer, params, prompts, completions, group.to(device), cfg, reference)
            _synchronize(device)
            seconds.append(time.perf_counter() - start)
    if rss is None:
        peak, how = int(torch.cuda.max_memory_allocated(device)), "torch.cuda.max_memory_allocated"
    else:
        peak, how = max(0, rss.growth), "peak RSS growth"
    del model, optimizer, params, reference
    return {
        "rows": rows,
        "tokens": tokens,
        "training": f"LoRA r={cfg.learner.lora.r}" if cfg.learner.lora.enabled else "full",
        "precision": precision.describe() + (" + loss scaler" if precision.scaler else ""),
        "peak_bytes": peak,
        "peak_measured_by": how,
        "estimate_first_step_bytes": estimate.first_step,
        "estimate_ratio": estimate.first_step / peak if peak else math.nan,
        "first_step_s": seconds[0],
        "step_s": seconds[1],
        "tokens_per_s": tokens / seconds[1],
    }


def step_loss(
    model, precision: Precision, prompts, completions, group, cfg: NodeConfig, reference: ReferencePolicy | None = None
) -> torch.Tensor:
    """The configured policy loss of one micro-batch of synthetic rows (behaviour log-probs a little below the
    learner's, rewards alternating 0/1), forward under the learner's precision (and the reference's log-probs
    when `reference` is given)."""
    with precision.autocast():
        scores = completion_scores(model, prompts, completions, cfg.sampler.temperature, 0)
    gen = torch.Generator().manual_seed(2)
    logq = scores.logp.detach() - 0.01 * torch.rand(scores.logp.shape, generator=gen).to(scores.logp.device)
    logq = logq * scores.mask
    rewards = (torch.arange(len(prompts), device=group.device) % 2).float()
    ref_logp = None  # with beta > 0 and no reference given: the learner's own log-probs (a KL term of 0)
    if reference is not None:
        ref_logp = reference.logprobs(prompts, completions, cfg.sampler.temperature, 0, precision.autocast)
    elif cfg.learner.beta > 0:
        ref_logp = scores.logp.detach()
    loss, _ = policy_loss(
        cfg.learner.algorithm, scores.logp, logq, scores.mask, rewards, group, cfg.learner, ref_logp=ref_logp
    )
    return loss


def _one_step(
    model,
    precision: Precision,
    optimizer,
    params,
    prompts,
    completions,
    group,
    cfg: NodeConfig,
    reference: ReferencePolicy | None,
) -> None:
    model.train()
    optimizer.zero_grad(set_to_none=True)
    precision.backward(step_loss(model, precision, prompts, completions, group, cfg, reference))
    precision.unscale(optimizer)
    norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.learner.max_grad_norm))
    precision.optimizer_step(optimizer, math.isfinite(norm))
    optimizer.zero_grad(set_to_none=True)
