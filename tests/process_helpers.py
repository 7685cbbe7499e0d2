"""Which processes a test starts: while a test runs, every way its code can start one (`subprocess` and asyncio's
subprocesses, `multiprocessing`, `os.fork`, `posix_spawn`, `os.system`) is watched and named, except the standard
library's own quick probes of the system (PROBES). tests/conftest.py uses it to fail a test that starts a process
without requesting the `starts_processes` fixture (so without the `scenario` marker): the marker comes from what a
test declares, and the watch keeps the declaration true."""

from __future__ import annotations

import _posixsubprocess
import contextlib
import multiprocessing.process
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

# what the standard library runs to look at the system, no process a test starts: ctypes.util.find_library
# (ldconfig, gcc, ld, objdump: `swarmnode.allocator` finds libc so) and platform.architecture (file)
PROBES = frozenset({"ldconfig", "gcc", "cc", "ld", "objdump", "file"})


def _program(command: Any) -> str:
    """A command's program, without its directory: `ldconfig` for ['/sbin/ldconfig', '-p']."""
    first = command if isinstance(command, (str, bytes)) else next(iter(command), "")
    return os.path.basename(os.fsdecode(first))


def _command(kind: str) -> Callable[..., str | None]:
    """What a call whose first argument is the command (or the program's path) starts; None for a probe."""

    def describe(command: Any, *_args: Any, **_kwargs: Any) -> str | None:
        if _program(command) in PROBES:
            return None
        return f"{kind} {command if isinstance(command, (str, bytes)) else list(command)[:4]}"

    return describe


# (owner, attribute, what the call starts) for every entry point that starts a process
_WATCHED: list[tuple[Any, str, Callable[..., str | None]]] = [
    (subprocess, "_fork_exec", _command("subprocess")),
    (_posixsubprocess, "fork_exec", _command("fork_exec")),
    (os, "posix_spawn", _command("posix_spawn")),
    (os, "posix_spawnp", _command("posix_spawnp")),
    (os, "system", _command("os.system")),
    (os, "fork", lambda *_a, **_k: "os.fork"),
    (os, "forkpty", lambda *_a, **_k: "os.forkpty"),
    (
        multiprocessing.process.BaseProcess,
        "start",
        lambda process, *_a, **_k: f"multiprocessing {getattr(process, '_target', None) or type(process).__name__}",
    ),
]


@contextlib.contextmanager
def processes_started() -> Iterator[list[str]]:
    """While inside: each process started (by any thread) is named in the list yielded, and still starts."""
    started: list[str] = []
    originals = []
    for owner, name, describe in _WATCHED:
        original = getattr(owner, name, None)
        if original is None:
            continue
        originals.append((owner, name, original))
        setattr(owner, name, _watched(original, describe, started))
    try:
        yield started
    finally:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)


def _watched(
    original: Callable[..., Any], describe: Callable[..., str | None], started: list[str]
) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            if (what := describe(*args, **kwargs)) is not None:
                started.append(what)
        return original(*args, **kwargs)

    return call
