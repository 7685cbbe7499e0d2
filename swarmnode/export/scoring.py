"""`swarmnode eval --model DIR`: an exported model (or adapter) and the run's base model scored on the task's
held-out split with the same prompts, samples and seeds (`swarmnode.local.evaluation.prompt_rewards`), so the two
are paired prompt by prompt: each one's mean@k and exact@k, and the per-prompt difference (mean, standard error,
prompts better / worse / tied)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmnode.config import NodeConfig
from swarmnode.export.errors import ExportError
from swarmnode.local.evaluation import prompt_rewards
from swarmnode.tasks import Task, build_task

Progress = Callable[[str, int, int], None]  # (which model, prompts done, prompts total)
EVAL_BATCH = 16  # prompts per generation call (one progress step)


def load_exported(directory: Path, cfg: NodeConfig):
    """(model, tokenizer) of an exported directory: a model directory, or a PEFT adapter over the run's base."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swarmnode.model.models import load_model

    directory = Path(directory)
    model: Any
    try:
        if (directory / "adapter_config.json").is_file():
            from peft import PeftModel

            model = PeftModel.from_pretrained(load_model(cfg.model, cfg.task), str(directory))
        elif (directory / "config.json").is_file():
            model = AutoModelForCausalLM.from_pretrained(directory)
        else:
            raise ExportError(f"{directory} holds no model (no config.json or adapter_config.json)")
        tokenizer = AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError) as exc:
        raise ExportError(f"{directory}: cannot load ({str(exc).splitlines()[0]})") from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if cfg.model.prompt_format == "plain":  # prompts as the run rendered them
        tokenizer.chat_template = None
    return model, tokenizer


def score(model, tokenizer, task: Task, cfg: NodeConfig, samples: int, on_batch: Callable[[int, int], None]):
    """Each held-out prompt's rewards for `model`, sampled as the run samples (temperature, lengths), seeded."""
    s = cfg.sampler
    return prompt_rewards(
        model,
        tokenizer,
        task,
        samples=samples,
        temperature=s.temperature,
        max_new_tokens=s.max_completion_length,
        max_prompt_tokens=s.max_prompt_length,
        seed=cfg.task.seed,
        batch=EVAL_BATCH,
        progress=on_batch,
    )


def summary(rows: list[list[float]], samples: int) -> dict[str, float]:
    """mean@k, exact@k and the prompt count of one model's rewards (the keys `local.evaluation.evaluate` uses)."""
    flat = [r for row in rows for r in row]
    if not flat:
        raise ExportError("the task has no held-out prompts to score")
    return {
        "eval_reward": statistics.fmean(flat),
        "eval_exact": sum(r >= 1.0 for r in flat) / len(flat),
        "eval_prompts": float(len(rows)),
        "samples": float(samples),
    }


def paired(model_rows: list[list[float]], base_rows: list[list[float]]) -> dict[str, float]:
    """The per-prompt difference model - base: mean, standard error, prompts better, worse and tied."""
    diffs = [statistics.fmean(a) - statistics.fmean(b) for a, b in zip(model_rows, base_rows)]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return {
        "mean_diff": statistics.fmean(diffs),
        "stderr": se,
        "better": float(sum(d > 0 for d in diffs)),
        "worse": float(sum(d < 0 for d in diffs)),
        "tied": float(sum(d == 0 for d in diffs)),
        "prompts": float(len(diffs)),
    }


def evaluate_dir(
    directory: Path, cfg: NodeConfig, *, samples: int = 4, base: bool = True, progress: Progress | None = None
) -> dict[str, Any]:
    """The eval document: the exported model's held-out figures, and with `base` the base model's and the pair."""
    from swarmnode.model.models import load_model, load_tokenizer

    task = build_task(cfg.task)
    tell = progress or (lambda _which, _done, _total: None)
    model, tokenizer = load_exported(directory, cfg)
    rows = score(model, tokenizer, task, cfg, samples, lambda d, t: tell("model", d, t))
    doc: dict[str, Any] = {"model": str(directory), "task": cfg.task.name, "model_scores": summary(rows, samples)}
    if base:
        base_rows = score(
            load_model(cfg.model, cfg.task),
            load_tokenizer(cfg.model, cfg.task),
            task,
            cfg,
            samples,
            lambda d, t: tell("base", d, t),
        )
        doc.update(base=cfg.model.name, base_scores=summary(base_rows, samples), paired=paired(rows, base_rows))
    return doc


def format_eval(doc: dict[str, Any]) -> str:
    """The plain-text answer of `swarmnode eval`."""
    m = doc["model_scores"]
    lines = [
        f"{doc['model']}: held-out reward {m['eval_reward']:.4f} (exact {m['eval_exact']:.4f}) over "
        f"{int(m['eval_prompts'])} prompts x {int(m['samples'])} samples, task {doc['task']}"
    ]
    if "base_scores" in doc:
        b, p = doc["base_scores"], doc["paired"]
        lines.append(f"base {doc['base']}: held-out reward {b['eval_reward']:.4f} (exact {b['eval_exact']:.4f})")
        lines.append(
            f"paired over the same prompts: {p['mean_diff']:+.4f} +- {p['stderr']:.4f} (model - base); "
            f"better on {int(p['better'])}, worse on {int(p['worse'])}, tied on {int(p['tied'])}"
        )
    return "\n".join(lines)
