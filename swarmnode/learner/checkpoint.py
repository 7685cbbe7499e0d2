"""Atomic learner checkpoints and a SIGTERM/SIGINT stop flag.

A checkpoint is one `torch.save` file written to a temporary name, fsynced, then renamed over
`checkpoint.pt` (a crash mid-write leaves the previous checkpoint intact). It is loaded with
`weights_only=True`: tensors, numbers, strings and containers only, never arbitrary pickles.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Any

import torch

from swarmnode.errors import ExitCode, SwarmnodeError

CHECKPOINT_NAME = "checkpoint.pt"


class CheckpointError(SwarmnodeError, RuntimeError):
    """A checkpoint exists but cannot be read or does not fit the model; the message says which file."""

    exit_code = ExitCode.MISSING


def save_checkpoint(directory: str | Path, state: dict[str, Any]) -> Path:
    """Write `state` atomically to `directory/checkpoint.pt` and return the path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / CHECKPOINT_NAME
    tmp = directory / f".{CHECKPOINT_NAME}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    fsync_dir(directory)
    return final


def fsync_dir(directory: str | Path) -> None:
    """Make a rename in `directory` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        fh.write(f"{int(version)}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


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


class StopFlag:
    """Context manager: SIGTERM/SIGINT set `.requested` (and `.signal`) instead of killing the process,
    so the loop can finish its step, write a checkpoint and exit. Previous handlers come back on exit."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)):
        self.signals, self.requested, self.signal = signals, False, None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum, _frame) -> None:
        self.requested, self.signal = True, signum

    def __enter__(self) -> "StopFlag":
        for s in self.signals:
            self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
