"""Run the self-check's parts for a config and print them as one table (`swarmnode hardware --measure`)."""

from __future__ import annotations

import platform
from typing import Callable

import torch

from swarmnode.config import NodeConfig
from swarmnode.models import pick_device

GiB = 1024**3
Progress = Callable[[str], None]


def _guarded(name: str, fn: Callable[[], object], progress: Progress) -> object:
    """Run one part; a failure (out of memory, a missing kernel) is recorded in its row, not fatal."""
    progress(f"self-check: {name} ...")
    try:
        return fn()
    except (RuntimeError, ValueError, torch.cuda.OutOfMemoryError) as exc:  # OOM, missing kernels, bad shapes
        return {"error": (str(exc).splitlines() or [type(exc).__name__])[0][:200]}
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def run_selfcheck(cfg: NodeConfig, device: str = "auto", parts: tuple[str, ...] = ("step", "generation", "floor",
                                                                                    "fp16"),
                  progress: Progress = lambda _: None) -> dict:
    """Every part's figures for `cfg`'s model on `device` (`auto`: the first GPU, else the CPU)."""
    from swarmnode.selfcheck.floor import floor_for
    from swarmnode.selfcheck.fp16 import fp16_gradients
    from swarmnode.selfcheck.generation import generation_batches
    from swarmnode.selfcheck.step import learner_step

    dev = pick_device(device)
    report: dict = {"model": cfg.model.name, "dtype": cfg.model.dtype, "device": _device_name(dev),
                    "torch": torch.__version__, "python": platform.python_version()}
    run = {"step": lambda: learner_step(cfg, dev), "generation": lambda: generation_batches(cfg, dev),
           "floor": lambda: floor_for(cfg, dev), "fp16": lambda: fp16_gradients(cfg, dev)}
    for name in parts:
        report[name] = _guarded(name, run[name], progress)
    return report


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(dev)} (bf16: {'yes' if torch.cuda.is_bf16_supported() else 'no'})"
    return f"cpu: {platform.processor() or platform.machine()}"


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def table_rows(report: dict) -> list[tuple[str, str]]:
    """(check, result) rows of the one table."""
    rows: list[tuple[str, str]] = []
    step = report.get("step")
    if step:
        if "error" in step:
            rows.append(("learner step", f"failed: {step['error']}"))
        else:
            rows.append(("learner step", f"{step['training']}, {step['rows']} rows x {step['tokens'] // step['rows']}"
                         f" tokens, {step['precision']}"))
            rows.append(("  peak memory", f"{_gib(step['peak_bytes'])} ({step['peak_measured_by']}); estimate "
                         f"{_gib(step['estimate_first_step_bytes'])} = {step['estimate_ratio']:.2f}x measured"))
            rows.append(("  speed", f"{step['tokens_per_s']:,.0f} tokens/s ({step['step_s']:.3f} s a step; first "
                         f"{step['first_step_s']:.3f} s)"))
    for gen in report.get("generation") or []:
        if isinstance(gen, dict) and "engine" in gen:
            what = f"generation ({gen['engine']})"
            if "skipped" in gen:
                rows.append((what, f"skipped: {gen['skipped']}"))
            else:
                rows.append((what, f"{gen['tokens_per_s']:,.0f} tokens/s ({gen['prompts']} prompts x "
                             f"{gen['generations']} x {gen['max_new_tokens']} tokens, {gen['weights']} weights)"))
    gen = report.get("generation")
    if isinstance(gen, dict) and "error" in gen:
        rows.append(("generation", f"failed: {gen['error']}"))
    floor = report.get("floor")
    if floor:
        if "error" in floor:
            rows.append(("bf16 log-prob floor", f"failed: {floor['error']}"))
        else:
            rows.append(("bf16 log-prob floor", f"|d log p| per token mean {floor['token_mean']:.4f}, p99 "
                         f"{floor['token_p99']:.3f}, max {floor['token_max']:.3f}; worst group median "
                         f"{floor['group_median_max']:.4f} nats ({floor['weights']} weights; learner "
                         f"{floor['learner']})"))
    fp16 = report.get("fp16")
    if fp16:
        if "error" in fp16:
            rows.append(("fp16 gradients", f"failed: {fp16['error']}"))
        else:
            for kind in ("scaled", "unscaled"):
                c = fp16[kind]
                label = "with the loss scaler" if kind == "scaled" else "without a scaler"
                rows.append((f"fp16 gradients, {label}", f"cosine {c['cosine']:.4f} to fp32, "
                             f"{100 * c['zeroed_fraction']:.2f} % entries zeroed, {c['tensors_without_gradient']} of "
                             f"{c['tensors']} tensors without gradient"))
    return rows


def format_selfcheck(report: dict) -> str:
    """The self-check as one plain-text table."""
    rows = table_rows(report)
    width = max(len(a) for a, _ in rows) if rows else 0
    head = f"self-check of {report['model']} ({report['dtype']}) on {report['device']}, torch {report['torch']}"
    return "\n".join([head] + [f"{a.ljust(width)}  {b}" for a, b in rows])
