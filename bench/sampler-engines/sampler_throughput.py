"""Sampler throughput: HFEngine vs plain `model.generate` on the same prompts (ratio), VLLMEngine vs HFEngine when
vLLM is importable, and the behaviour log-prob mismatch of each engine against the learner's forward.

    python bench/sampler-engines/sampler_throughput.py [--prompts 16] [--generations 8] [--max-new 8] [--rounds 3] [--no-vllm]
    python bench/sampler-engines/sampler_throughput.py --config smollm2-135m --prompts 4 --generations 4 --max-new 32 --rounds 3

Without `--config`: the built-in tiny model on the arithmetic task; with it, that preset's model and task (prompts
encoded as the engines encode them, chat template included, for every contender).

Tokens/s counts completion tokens up to and including the first EOS (the same count for every contender).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from swarmnode.model.logprobs import behaviour_mismatch


def plain_generate_rate(engine, prompts, g, temperature, max_new) -> float:
    """Baseline: one `model.generate` call with sampling, no log-probs, no post-processing beyond counting."""
    model, tokenizer = engine.model, engine.tokenizer
    ids, mask = engine._left_pad(engine.encode_prompts(prompts))
    batch = {"input_ids": ids, "attention_mask": mask}
    eos = tokenizer.eos_token_id
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            **batch,
            do_sample=True,
            temperature=temperature,
            top_k=0,
            top_p=1.0,
            max_new_tokens=max_new,
            num_return_sequences=g,
            pad_token_id=tokenizer.pad_token_id,
        )
    seconds = time.perf_counter() - start
    new = out[:, batch["input_ids"].shape[1] :].tolist()
    tokens = sum(row.index(eos) + 1 if eos in row else len(row) for row in new)
    return tokens / seconds


def engine_rate(engine, prompts, g, temperature, max_new):
    start = time.perf_counter()
    gens = engine.generate(prompts, g, temperature, max_new)
    seconds = time.perf_counter() - start
    return sum(len(c) for x in gens for c in x.completions) / seconds, gens


def median(values):
    return sorted(values)[len(values) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max-new", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warm-start-steps", type=int, default=300)
    parser.add_argument("--no-vllm", action="store_true")
    parser.add_argument("--config", help="a preset or YAML (its model and task) instead of the tiny model")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import random

    from swarmnode.config import NodeConfig, load_config
    from swarmnode.model.models import load_model, load_tokenizer, resolve_model_path
    from swarmnode.sampler.engines import HFEngine
    from swarmnode.tasks import build_task

    if args.config:
        cfg = load_config(args.config)
    else:
        cfg = NodeConfig.model_validate({"model": {"tiny": {"warm_start_steps": args.warm_start_steps}}})
    tokenizer = load_tokenizer(cfg.model, cfg.task)
    model = load_model(cfg.model, cfg.task).eval()
    prompts = [p.text for p in build_task(cfg.task).sample(args.prompts, random.Random(0))]
    g, t, n = args.generations, args.temperature, args.max_new
    hf = HFEngine(model, tokenizer, max_prompt_tokens=cfg.sampler.max_prompt_length)
    plain_generate_rate(hf, prompts, g, t, n)  # warm-up
    engine_rate(hf, prompts, g, t, n)
    plain, ours, gaps = [], [], []
    for _ in range(args.rounds):  # interleaved, so machine load hits both alike
        plain.append(plain_generate_rate(hf, prompts, g, t, n))
        rate, gens = engine_rate(hf, prompts, g, t, n)
        ours.append(rate)
        gaps.append(behaviour_mismatch(model, gens, t, tokenizer.pad_token_id)[0])
    result = {
        "model": cfg.model.name,
        "batch": f"{args.prompts} prompts x G={g}, max_new={n}, T={t}",
        "plain_generate_tok_s": round(median(plain), 1),
        "hf_engine_tok_s": round(median(ours), 1),
        "hf_vs_plain_ratio": round(median(ours) / median(plain), 3),
        "hf_logprob_mismatch_mean_abs": max(gaps),
    }
    if not args.no_vllm:
        try:
            import vllm  # noqa: F401
        except ImportError:
            result["vllm"] = "not installed"
        else:
            from swarmnode.sampler.engines import VLLMEngine

            start = time.perf_counter()
            engine = VLLMEngine(
                resolve_model_path(cfg.model, cfg.task),
                tokenizer,
                gpu_memory_utilization=0.2,
                max_model_len=cfg.sampler.max_prompt_length + max(n, cfg.sampler.max_completion_length),
                max_prompt_tokens=cfg.sampler.max_prompt_length,
            )
            result["vllm_startup_s"] = round(time.perf_counter() - start, 1)
            try:
                engine_rate(engine, prompts, g, t, n)  # warm-up
                rates, vgaps = [], []
                for _ in range(args.rounds):
                    rate, gens = engine_rate(engine, prompts, g, t, n)
                    rates.append(rate)
                    vgaps.append(behaviour_mismatch(model, gens, t, tokenizer.pad_token_id)[0])
                hf_now = median([engine_rate(hf, prompts, g, t, n)[0] for _ in range(args.rounds)])
                result["vllm_engine_tok_s"] = round(median(rates), 1)
                result["vllm_vs_hf_ratio"] = round(median(rates) / hf_now, 3)
                result["vllm_logprob_mismatch_mean_abs"] = max(vgaps)
            finally:
                engine.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
