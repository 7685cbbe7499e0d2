"""The engine a sampler's config names (`sampler.engine`), built with the configured model: `build_engine`."""

from __future__ import annotations

import torch

from swarmnode.config import NodeConfig
from swarmnode.model.adapters import weights_hash
from swarmnode.sampler.engines import GenerationEngine, HFEngine


def build_engine(cfg: NodeConfig, version: int = 0, seed: int | None = None) -> GenerationEngine:
    """The engine named by `cfg.sampler.engine`, loaded with the configured model at `version`; `seed` seeds its
    sampling (a sampler's `sampler_seed`; None: the transformers engine uses the global torch RNG, vLLM
    `task.seed`)."""
    from swarmnode.model.models import load_model, load_tokenizer, pick_device, resolve_model_path

    tokenizer = load_tokenizer(cfg.model, cfg.task)
    if cfg.sampler.engine == "hf":
        model = load_model(cfg.model, cfg.task, pick_device(cfg.sampler.device))
        return HFEngine(model, tokenizer, max_prompt_tokens=cfg.sampler.max_prompt_length, version=version, seed=seed)
    lora = cfg.learner.lora.enabled  # the base weights' hash needs them on the CPU once (vLLM packs its own)
    base_hash = weights_hash(load_model(cfg.model, cfg.task, "cpu").state_dict()) if lora else None
    from swarmnode.sampler.vllm_engine import VLLMEngine  # vLLM itself is imported only when it is asked for

    return VLLMEngine(
        resolve_model_path(cfg.model, cfg.task),
        tokenizer,
        dtype=cfg.model.dtype,
        gpu_memory_utilization=cfg.sampler.gpu_memory_utilization,
        max_model_len=cfg.sampler.max_prompt_length + cfg.sampler.max_completion_length,
        max_prompt_tokens=cfg.sampler.max_prompt_length,
        seed=cfg.task.seed if seed is None else seed,
        version=version,
        lora_rank=cfg.learner.lora.r if lora else None,
        base_hash=base_hash,
        enforce_eager=not _on_gpu(cfg.sampler.device),
    )


def _on_gpu(device: str) -> bool:
    """Whether the sampler's device is a GPU: vLLM captures CUDA graphs there (eager mode only on CPU)."""
    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
