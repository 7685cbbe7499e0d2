"""The `swarmnode` command line: one thin function per command (parse, build config, call into the package).

User mistakes (bad config, unreachable peers, missing model) end in one clear line and exit code 2 or 1,
never a traceback.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn, Optional

import typer

from swarmnode.config import ConfigError, NodeConfig, load_config

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="swarmnode: decentralized RL post-training of LLMs over a peer-to-peer swarm.",
)

ConfigOpt = typer.Option(None, "--config", "-c", help="preset name (e.g. tiny-cpu) or YAML path")
SetOpt = typer.Option(None, "--set", "-s", help="override a config key, e.g. learner.loss_type=gepo (repeatable)")
JsonOpt = typer.Option(False, "--json", help="print machine-readable JSON")
PeersOpt = typer.Option(None, "--initial-peers", help="bootstrap multiaddr(s), repeatable")


def fail(message: str, code: int = 2) -> NoReturn:
    """Print one error line to stderr and exit with `code`."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def config_from_cli(config: Optional[str], overrides: Optional[list[str]], **extra: Any) -> NodeConfig:
    """Load the config, then apply `--set` overrides and any command-line flags given (not None)."""
    sets = list(overrides or [])
    for key, value in extra.items():
        if value is None or value == []:
            continue
        sets.append(f"{key}={json.dumps(value)}")
    try:
        return load_config(config, sets)
    except ConfigError as exc:
        fail(str(exc))


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


def not_built(command: str) -> NoReturn:
    fail(f"`swarmnode {command}` is not built yet in this version", code=3)


@app.command()
def hardware(config: Optional[str] = ConfigOpt, set_: Optional[list[str]] = SetOpt, as_json: bool = JsonOpt) -> None:
    """Probe this machine and show the role it would take for the configured model."""
    not_built("hardware")


@app.command()
def join(config: Optional[str] = ConfigOpt, set_: Optional[list[str]] = SetOpt,
         initial_peers: Optional[list[str]] = PeersOpt) -> None:
    """Join a run's swarm and work as a sampler or learner."""
    not_built("join")


@app.command()
def bootstrap(config: Optional[str] = ConfigOpt, set_: Optional[list[str]] = SetOpt, as_json: bool = JsonOpt) -> None:
    """Host a long-lived bootstrap DHT peer for a run."""
    not_built("bootstrap")


@app.command()
def status(config: Optional[str] = ConfigOpt, set_: Optional[list[str]] = SetOpt,
           initial_peers: Optional[list[str]] = PeersOpt, as_json: bool = JsonOpt) -> None:
    """List the peers of a run (role, version, last seen)."""
    not_built("status")


@app.command()
def dashboard(config: Optional[str] = ConfigOpt, set_: Optional[list[str]] = SetOpt,
              initial_peers: Optional[list[str]] = PeersOpt) -> None:
    """A live terminal view of a run's swarm health."""
    not_built("dashboard")


@app.command()
def demo(as_json: bool = JsonOpt) -> None:
    """Run a local swarm (bootstrap, one learner, two samplers) with the tiny model and watch it learn."""
    not_built("demo")


@app.command("train-local")
def train_local(config: Optional[str] = ConfigOpt, set_: Optional[list[str]] = SetOpt, as_json: bool = JsonOpt) -> None:
    """Single-process sampler+learner loop: the reference the swarm is compared against."""
    not_built("train-local")


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
