"""Atomic learner checkpoints (what they hold: `learner_state` / `restore_learner`) and a SIGTERM/SIGINT stop flag.

A checkpoint is one `torch.save` file written to a temporary name, fsynced, then renamed over
`checkpoint.pt` (a crash mid-write leaves the previous checkpoint intact). It is loaded with
`weights_only=True`: tensors, numbers, strings and containers only, never arbitrary pickles.
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

import torch

from swarmnode.atomic import replacing, write_atomic
from swarmnode.config import NodeConfig
from swarmnode.diskspace import MARGIN_BYTES, DiskFullError, free_bytes, full_message, raise_if_full
from swarmnode.errors import ExitCode, SwarmnodeError
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.lora import adapter_state, is_lora, load_adapter_state
from swarmnode.protocol.manifest import AdapterSpec

CHECKPOINT_NAME = "checkpoint.pt"


class Checkpointed(Protocol):
    """What a checkpoint reads from and puts back into a learner (`swarmnode.learner.loop.LearnerLoop`): this
    module needs nothing else of the loop, and does not import it."""

    model: torch.nn.Module
    cfg: NodeConfig
    adapter_spec: AdapterSpec | None
    optimizer: torch.optim.Optimizer
    scheduler: Any  # a torch LR scheduler (state_dict / load_state_dict)
    version: int
    step_count: int
    rng: random.Random
    buffer: ReplayBuffer
    rejected: Counter

    @property
    def extra_state(self) -> dict[str, Any]: ...  # the caller's state to write

    restored_extra: dict[str, Any]  # the caller's state as read back
    checkpoint_dir: Path | None


class CheckpointError(SwarmnodeError, RuntimeError):
    """A checkpoint exists but cannot be read or does not fit the model; the message says which file."""

    exit_code = ExitCode.MISSING


def state_bytes(state: Any) -> int:
    """Bytes of the tensors in a (nested) checkpoint state: about what its file takes on disk."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write `state` atomically to `directory/checkpoint.pt` and return the path. `DiskFullError` (one line,
    the previous checkpoint intact, no temporary file left) when it does not fit."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / CHECKPOINT_NAME
    tmp = directory / f".{CHECKPOINT_NAME}.tmp{os.getpid()}"
    need = state_bytes(state)
    if free_bytes(directory) < need + MARGIN_BYTES:
        raise DiskFullError(full_message(directory, "the checkpoint", need), directory, need)
    try:
        with replacing(final, tmp=tmp, durable=True) as part, open(part, "wb") as fh:
            torch.save(state, fh)
    except (OSError, RuntimeError) as exc:  # torch.save reports a short write as RuntimeError
        if isinstance(exc, RuntimeError) and free_bytes(directory) < need + MARGIN_BYTES:
            raise DiskFullError(full_message(directory, "the checkpoint", need), directory, need) from exc
        raise_if_full(exc, directory, "the checkpoint", need)
        raise
    return final


def remove_stale_temp_files(directory: str | Path) -> int:
    """Delete checkpoint temp files left by saves that a crash interrupted (their writer, named by the pid
    suffix, is gone); how many were removed."""
    removed = 0
    for tmp in Path(directory).glob(f".{CHECKPOINT_NAME}.tmp*"):
        pid = tmp.name.rpartition(".tmp")[2]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue  # a save in progress in another process
        tmp.unlink(missing_ok=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_published(path: str | Path) -> int:
    """The highest version recorded by `write_published` at `path`, or -1."""
    try:
        return int(Path(path).read_text().strip() or -1)
    except (OSError, ValueError):
        return -1


def write_published(path: str | Path, version: int) -> None:
    """Record (atomically, fsynced) at `path` that `version` is about to be announced, before anyone sees it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, f"{int(version)}\n", tmp=path.with_name(f".{path.name}.tmp"), durable=True)


def load_checkpoint(directory: str | Path) -> dict[str, Any] | None:
    """The latest checkpoint in `directory`, or None when there is none (temp files of interrupted saves are
    removed: each could be as big as the model and optimiser state)."""
    if Path(directory).is_dir():
        remove_stale_temp_files(directory)
    path = Path(directory) / CHECKPOINT_NAME
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated file, foreign pickle, ...: say which file, never a traceback
        raise CheckpointError(f"checkpoint {path}: cannot load ({type(exc).__name__}: {exc})") from None


def rng_state(rng: random.Random | None = None) -> dict[str, Any]:
    """The RNG states a resumed run needs to continue the same random stream."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if rng is not None:
        state["loop"] = rng.getstate()
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def as_tuples(x):
    """Nested lists back to the nested tuples `random.Random.setstate` wants."""
    return tuple(as_tuples(v) for v in x) if isinstance(x, (list, tuple)) else x


def set_rng_state(state: dict[str, Any], rng: random.Random | None = None) -> None:
    """Restore what `rng_state` captured."""
    random.setstate(as_tuples(state["python"]))
    torch.set_rng_state(state["torch"])
    if rng is not None and "loop" in state:
        rng.setstate(as_tuples(state["loop"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def learner_state(loop: Checkpointed) -> dict[str, Any]:
    """What a learner's checkpoint holds: weights (the adapters alone under LoRA), optimiser, LR schedule,
    version and step, RNG, the buffer's position, rejection counters and the caller's `extra_state`."""
    lora = is_lora(loop.model)
    return {
        "model": adapter_state(loop.model) if lora else loop.model.state_dict(),
        "lora_base": loop.cfg.model.name if lora else None,
        "lora_base_hash": loop.adapter_spec.base_hash if loop.adapter_spec else None,
        "optimizer": loop.optimizer.state_dict(),
        "scheduler": loop.scheduler.state_dict(),
        "version": loop.version,
        "step": loop.step_count,
        "rng": rng_state(loop.rng),
        "buffer": loop.buffer.state_dict(),
        "rejected": dict(loop.rejected),
        "extra": loop.extra_state,
    }


def restore_learner(loop: Checkpointed, state: dict[str, Any]) -> None:
    """Put a loaded `learner_state` back into `loop` (same step and version as saved); `CheckpointError` when it
    does not fit the loop's model or optimiser."""
    try:
        if is_lora(loop.model) != bool(state.get("lora_base")):
            raise ValueError("saved with learner.lora.enabled=" + str(bool(state.get("lora_base"))).lower())
        if is_lora(loop.model):
            if state["lora_base"] != loop.cfg.model.name:
                raise ValueError(f"its adapters belong to {state['lora_base']}, not {loop.cfg.model.name}")
            spec = loop.adapter_spec
            if state.get("lora_base_hash") not in (None, spec.base_hash if spec is not None else None):
                raise ValueError(f"its adapters belong to other base weights than {loop.cfg.model.name}'s")
            load_adapter_state(loop.model, state["model"])
        else:
            loop.model.load_state_dict(state["model"])
        loop.optimizer.load_state_dict(state["optimizer"])
        if "scheduler" in state:
            loop.scheduler.load_state_dict(state["scheduler"])
    except (RuntimeError, KeyError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint in {loop.checkpoint_dir} does not fit this model/optimizer ({str(exc).splitlines()[0]})"
        ) from None
    loop.version, loop.step_count = int(state["version"]), int(state["step"])
    set_rng_state(state["rng"], loop.rng)
    loop.buffer.load_state_dict(state["buffer"])
    loop.buffer.set_version(loop.version)
    loop.rejected.clear()  # in place: the loop's GroupRows counts into this Counter
    loop.rejected.update(state.get("rejected", {}))
    loop.restored_extra = state.get("extra", {})


class StopFlag:
    """Context manager: SIGTERM/SIGINT set `.requested` (and `.signal`) instead of killing the process,
    so the loop can finish its step, write a checkpoint and exit. Previous handlers come back on exit."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)):
        self.signals, self.requested, self.signal = signals, False, None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, _frame) -> None:
        self.requested, self.signal = True, signum

    def __enter__(self) -> StopFlag:
        for s in self.signals:
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
