"""Run the self-check's parts for a config and print them as one table (`swarmnode hardware --measure`)."""

from __future__ import annotations

import platform
from collections.abc import Callable

import torch

from swarmnode.config import NodeConfig
from swarmnode.errors import ExitCode, SwarmnodeError
from swarmnode.model.models import pick_device

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


def run_selfcheck(
    cfg: NodeConfig,
    device: str = "auto",
    parts: tuple[str, ...] = ("step", "generation", "floor", "fp16"),
    progress: Progress = lambda _: None,
) -> dict:
    """Every part's figures for `cfg`'s model on `device` (`auto`: the first GPU, else the CPU)."""
    from swarmnode.node.selfcheck.floor import floor_for
    from swarmnode.node.selfcheck.fp16 import fp16_gradients
    from swarmnode.node.selfcheck.generation import generation_batches
    from swarmnode.node.selfcheck.step import learner_step

    dev = _device(device)
    report: dict = {
        "model": cfg.model.name,
        "dtype": cfg.model.dtype,
        "device": _device_name(dev),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    run = {
        "step": lambda: learner_step(cfg, dev),
        "generation": lambda: generation_batches(cfg, dev),
        "floor": lambda: floor_for(cfg, dev),
        "fp16": lambda: fp16_gradients(cfg, dev),
    }
    for name in parts:
        report[name] = _guarded(name, run[name], progress)
    return report


def _device(spec: str) -> torch.device:
    """The device `spec` names, or a usage error saying why not (never a traceback)."""
    try:
        dev = pick_device(spec)
    except RuntimeError:
        raise SwarmnodeError(
            f"--device {spec!r}: expected auto, cpu, cuda or cuda:N", exit_code=ExitCode.USAGE
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SwarmnodeError(
            f"--device {spec}: this torch sees no CUDA GPU (use --device cpu)", exit_code=ExitCode.USAGE
        )
    return dev


def _device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(dev)} (bf16: {'yes' if torch.cuda.is_bf16_supported() else 'no'})"
    return f"cpu: {platform.processor() or platform.machine()}"


def _gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB"


def _step_rows(step: dict) -> list[tuple[str, str]]:
    return [
        (
            "learner step",
            f"{step['training']}, {step['rows']} rows x {step['tokens'] // step['rows']} tokens, {step['precision']}",
        ),
        (
            "  peak memory",
            f"{_gib(step['peak_bytes'])} ({step['peak_measured_by']}); estimate "
            f"{_gib(step['estimate_first_step_bytes'])} = {step['estimate_ratio']:.2f}x measured",
        ),
        (
            "  speed",
            f"{step['tokens_per_s']:,.0f} tokens/s ({step['step_s']:.3f} s a step; first {step['first_step_s']:.3f} s)",
        ),
    ]


def _generation_rows(engines: list[dict]) -> list[tuple[str, str]]:
    return [
        (
            f"generation ({g['engine']})",
            f"skipped: {g['skipped']}"
            if "skipped" in g
            else f"{g['tokens_per_s']:,.0f} tokens/s ({g['prompts']} prompts x {g['generations']} x "
            f"{g['max_new_tokens']} tokens, {g['weights']} weights)",
        )
        for g in engines
    ]


def _floor_rows(floor: dict) -> list[tuple[str, str]]:
    return [
        (
            "bf16 log-prob floor",
            f"|d log p| per token mean {floor['token_mean']:.4f}, p99 "
            f"{floor['token_p99']:.3f}, max {floor['token_max']:.3f}; worst group median "
            f"{floor['group_median_max']:.4f} nats ({floor['weights']} weights; learner {floor['learner']})",
        )
    ]


def _fp16_rows(fp16: dict) -> list[tuple[str, str]]:
    rows = []
    for kind, label in (("scaled", "with the loss scaler"), ("unscaled", "without a scaler")):
        c = fp16[kind]
        rows.append(
            (
                f"fp16 gradients, {label}",
                f"cosine {c['cosine']:.4f} to fp32, "
                f"{100 * c['zeroed_fraction']:.2f} % entries zeroed, {c['tensors_without_gradient']} of "
                f"{c['tensors']} tensors without gradient",
            )
        )
    return rows


PARTS = (
    ("step", "learner step", _step_rows),
    ("generation", "generation", _generation_rows),
    ("floor", "bf16 log-prob floor", _floor_rows),
    ("fp16", "fp16 gradients", _fp16_rows),
)


def table_rows(report: dict) -> list[tuple[str, str]]:
    """(check, result) rows of the one table; a part that failed is one `failed: ...` row."""
    rows: list[tuple[str, str]] = []
    for part, label, render in PARTS:
        result = report.get(part)
        if not result:
            continue
        if isinstance(result, dict) and "error" in result:
            rows.append((label, f"failed: {result['error']}"))
        else:
            rows += render(result)
    return rows


def format_selfcheck(report: dict) -> str:
    """The self-check as one plain-text table."""
    rows = table_rows(report)
    width = max(len(a) for a, _ in rows) if rows else 0
    head = f"self-check of {report['model']} ({report['dtype']}) on {report['device']}, torch {report['torch']}"
    return "\n".join([head] + [f"{a.ljust(width)}  {b}" for a, b in rows])
