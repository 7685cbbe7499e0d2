"""The commands that watch a run: `status` (the swarm's health, or this machine's node with `--self`) and
`dashboard` (a live terminal view, or the run page with `--web`)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer

from swarmnode.cli.options import ConfigOpt, HostOpt, InviteArg, JsonOpt, PeersOpt, SetOpt, StartupOpt
from swarmnode.cli.running import emit, print_json, run_swarm_command
from swarmnode.cli.settings import client_config, config_from_cli
from swarmnode.errors import ExitCode, Interrupted


def status(
    invite: str | None = InviteArg,
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    initial_peers: list[str] | None = PeersOpt,
    as_json: bool = JsonOpt,
    host_maddrs: list[str] | None = HostOpt,
    startup_timeout: float | None = StartupOpt,
    self_: bool = typer.Option(
        False,
        "--self",
        help="this machine's node only, from its data directory, "
        "in one line; exit 0 contributing, 1 idle, 2 failing, 3 no node found",
    ),
    on_alert: str | None = typer.Option(
        None,
        "--on-alert",
        help="with --self: shell command run when the node's state changes (SWARMNODE_ALERT_* in its environment)",
    ),
    watch: float | None = typer.Option(None, "--watch", min=1, help="with --self: check every N s"),
    page: int = typer.Option(1, "--page", min=1, help="a large run's page of peers, the worst first"),
    exact: bool = typer.Option(False, "--exact", help="read every peer record, however many"),
) -> None:
    """The run's health: peers (role, version, lag, last seen), newest version, alerts; --json: schema v2 (docs/status-and-metrics.md)."""
    if self_ or on_alert or watch:
        self_status(config, set_, as_json, on_alert, watch)
    cfg, card = client_config("status", config, set_, initial_peers, host_maddrs, startup_timeout, invite)
    from swarmnode.observe.status import format_status, query_status

    doc = run_swarm_command(lambda stop: query_status(cfg, exact), timeout=cfg.network.startup_timeout + 30)
    if card is not None:
        from swarmnode.observe.card_view import format_card, with_card

        doc = with_card(doc, card)
    if as_json:
        print_json(doc)
    else:
        typer.echo("\n".join([*([format_card(doc["card"])] if card is not None else []), format_status(doc, page - 1)]))
        if any(alert["severity"] == "error" for alert in doc["alerts"]):  # an `error:` line: not a 0 exit
            raise typer.Exit(int(ExitCode.FAILURE))


def self_status(config, set_, as_json: bool, on_alert: str | None, watch: float | None) -> NoReturn:
    """`status --self`: the local node's one-line answer and its exit code (docs/status-and-metrics.md)."""
    from swarmnode.config import default_data_dir
    from swarmnode.observe.self_status import run_self_status

    cfg = config_from_cli(config, set_)
    raise typer.Exit(
        run_self_status(
            Path(cfg.resolved_data_dir()),
            bool(cfg.data_dir),
            as_json=as_json,
            on_alert=on_alert,
            watch=watch,
            echo=typer.echo,
            home=default_data_dir(),
        )
    )


def dashboard(
    invite: str | None = InviteArg,
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    initial_peers: list[str] | None = PeersOpt,
    host_maddrs: list[str] | None = HostOpt,
    startup_timeout: float | None = StartupOpt,
    refresh: float = typer.Option(3.0, "--refresh", min=0.5, max=600, help="seconds between polls"),
    once: bool = typer.Option(False, "--once", help="draw one view and exit"),
    web: str | None = typer.Option(
        None,
        "--web",
        help="serve the run page at ADDR:PORT (read-only; JSON at /status.json) instead of the terminal view",
    ),
) -> None:
    """A live terminal view of a run's swarm health (q or Ctrl-C quits), or the run page in a browser (`--web`)."""
    if web is not None:
        from swarmnode.web.run import parse_address

        address = parse_address(web)
    cfg, card = client_config("dashboard", config, set_, initial_peers, host_maddrs, startup_timeout, invite)
    if web is not None:
        from swarmnode.web.run import run_web

        try:
            run_swarm_command(lambda stop: run_web(cfg, stop, address, refresh=refresh, card=card, emit=emit))
        except Interrupted:
            pass
        return
    from swarmnode.observe.dashboard import run_dashboard

    try:
        run_swarm_command(lambda stop: run_dashboard(cfg, stop, refresh=refresh, once=once, card=card))
    except Interrupted:  # Ctrl-C is the view's documented way out, as q is: exit code 0
        pass
