"""The options several commands share (`--config`, `--set`, `--json`, the network flags ...), written once."""

from __future__ import annotations

import typer

ConfigOpt = typer.Option(None, "--config", "-c", help="preset name (e.g. tiny-cpu) or YAML path")
SetOpt = typer.Option(None, "--set", "-s", help="override a config key, e.g. learner.cppo_beta=0.005 (repeatable)")
JsonOpt = typer.Option(False, "--json", help="print machine-readable JSON")
PeersOpt = typer.Option(None, "--initial-peers", help="bootstrap multiaddr(s), repeatable")
InviteArg = typer.Argument(
    None, help="the run's invite (swarmnode1:..., printed by `swarmnode host`)", show_default=False
)
RoleOpt = typer.Option(None, "--role", help="auto | sampler | learner (overrides the config's role)")
HostOpt = typer.Option(None, "--host-maddrs", help="listen multiaddr(s), repeatable (network.host_maddrs)")
AnnounceOpt = typer.Option(None, "--announce-maddrs", help="public multiaddr(s) to advertise, repeatable")
IdentityOpt = typer.Option(None, "--identity-path", help="key file (created 0600 on first use); keeps the peer id")
StartupOpt = typer.Option(None, "--startup-timeout", help="seconds to start p2pd and reach an initial peer")
MetricsPortOpt = typer.Option(
    None,
    "--metrics-port",
    min=0,
    max=65535,
    help="serve Prometheus /metrics on this port (0 = any free port; = metrics.port)",
)
PublicNameOpt = typer.Option(
    None, "--public-name", help="a name shown beside this node's key in status, the dashboard and the run page"
)
