"""The typer app: the global options (`--debug`, `--version`), the commands in their `--help` order, and `main`,
where every `SwarmnodeError` ends as one line and its exit code."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, NoReturn

import typer

from swarmnode import __version__
from swarmnode.allocator import keep_freed_memory
from swarmnode.cli.local_commands import demo, hardware, train_local
from swarmnode.cli.model_commands import eval_model, export
from swarmnode.cli.node_commands import bootstrap, host, identity, join
from swarmnode.cli.running import DEBUG_ENV, report
from swarmnode.cli.watch_commands import dashboard, status
from swarmnode.errors import Interrupted, SwarmnodeError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # click's plain help: option text wraps at any width (rich cut it at 80 columns)
    help="swarmnode: decentralized RL post-training of LLMs over a peer-to-peer swarm.",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"swarmnode {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="show tracebacks (also SWARMNODE_DEBUG=1)"),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    if debug:
        os.environ[DEBUG_ENV] = "1"


# the commands, in the order `swarmnode --help` lists them
app.command()(hardware)
app.command()(join)
app.command()(identity)
app.command()(bootstrap)
app.command()(host)
app.command()(status)
app.command()(dashboard)
app.command()(demo)
app.command("train-local")(train_local)
app.command()(export)
app.command("eval")(eval_model)


def main() -> None:
    """Console-script entry point: run the command; every error ends here as one line and its exit code."""
    from swarmnode.cli_runtime import exit_zero_on_sigterm

    exit_zero_on_sigterm()  # until a command's loop takes SIGTERM over (the console script's imports ran already)
    signal.signal(signal.SIGINT, _interrupt)  # not KeyboardInterrupt, which click would turn into exit code 1
    keep_freed_memory()  # before any model is loaded: generation's growing buffers stop faulting pages back in
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no loading bars in a node's output (=0: shown)
    try:
        plain_metavars(typer.main.get_command(app))()
    except SwarmnodeError as exc:
        sys.exit(report(exc))


def plain_metavars(command: Any) -> Any:
    """`--config CONFIG` in --help rather than typer's `--config <str>` (its type tags); the command returned."""
    for sub in [command, *getattr(command, "commands", {}).values()]:
        for param in sub.params:
            if not getattr(param, "is_flag", False) and param.param_type_name in ("option", "argument"):
                param.metavar = param.name.rstrip("_").upper()
    return command


def _interrupt(signum: int, frame: Any) -> NoReturn:
    raise Interrupted("interrupted")
