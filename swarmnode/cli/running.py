"""Running a command: its output lines, a swarm coroutine until Ctrl-C or SIGTERM, a node until it stops, and an
error as one line with its exit code (`--debug` or `SWARMNODE_DEBUG=1`: the traceback too)."""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from typing import Any, NoReturn

import typer

from swarmnode.errors import ExitCode, Interrupted, SwarmnodeError

DEBUG_ENV = "SWARMNODE_DEBUG"


def print_json(obj: Any) -> None:
    """A command's result as indented JSON on stdout."""
    typer.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


def emit(line: str) -> None:
    """One line of a running node's output, flushed at once."""
    typer.echo(line)
    sys.stdout.flush()


def run_node_command(main) -> NoReturn:
    """Run a node (`join`, `bootstrap`) until it stops, then exit at once with its code. By then it has left
    cleanly (record withdrawn, checkpoint written, p2pd stopped, output flushed); the interpreter's own teardown
    (freeing torch and hivemind, no Python frame left) took 1-3.6 s more per stop on a loaded 2-core machine."""
    try:
        run_swarm_command(main)
        code = int(ExitCode.OK)
    except Interrupted as exc:  # Ctrl-C: the same one line and exit code as `main` gives
        code = report(exc)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def run_swarm_command(main, timeout: float | None = None) -> Any:
    """Run a swarm coroutine until it returns or Ctrl-C / SIGTERM (`swarmnode.cli_runtime.run_until_signal`)."""
    from swarmnode.cli_runtime import run_until_signal, setup_logging

    setup_logging()
    return run_until_signal(main, timeout)


def report(exc: SwarmnodeError) -> int:
    """Print `exc` as one line (a traceback too when debugging) and return its exit code."""
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        traceback.print_exception(exc)
    if exc.exit_code == ExitCode.INTERRUPTED:
        typer.echo(str(exc) or "interrupted", err=True)
    else:
        typer.echo(f"error: {exc}", err=True)
    return int(exc.exit_code)
