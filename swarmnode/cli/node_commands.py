"""The commands that run a node in a swarm: `join`, `identity`, `bootstrap`, `host`."""

from __future__ import annotations

from pathlib import Path

import typer

from swarmnode.cli.options import (
    AnnounceOpt,
    ConfigOpt,
    HostOpt,
    IdentityOpt,
    InviteArg,
    JsonOpt,
    MetricsPortOpt,
    PeersOpt,
    PublicNameOpt,
    SetOpt,
    StartupOpt,
)
from swarmnode.cli.running import emit, run_node_command
from swarmnode.cli.settings import (
    BOOTSTRAP_MADDRS,
    check_public_name,
    cli_sets,
    config_and_card,
    config_from_cli,
    fail,
    network_flags,
)


def join(
    invite: str | None = InviteArg,
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    initial_peers: list[str] | None = PeersOpt,
    role: str | None = typer.Option(None, "--role", help="auto | sampler | learner"),
    host_maddrs: list[str] | None = HostOpt,
    announce_maddrs: list[str] | None = AnnounceOpt,
    identity_path: str | None = IdentityOpt,
    startup_timeout: float | None = StartupOpt,
    simulate_delay: str | None = typer.Option(
        None,
        "--simulate-delay",
        help="hold back deliveries: fixed:S | lognormal:MU,SIGMA[,MAX] | weibull:SCALE,SHAPE[,MAX]",
    ),
    idle: bool = typer.Option(False, "--idle", help="only advertise the role (no model, no work): a network check"),
    metrics_port: int | None = MetricsPortOpt,
    public_name: str | None = PublicNameOpt,
    insecure_accept_any_learner: bool = typer.Option(
        False,
        "--insecure-accept-any-learner",
        help="with no trust.learner_keys, load weights from whichever key announces them (local tests only)",
    ),
) -> None:
    """Join a run's swarm (by its invite, or every setting by hand) and work as a sampler or learner."""
    flags = {
        "role": role,
        "sync.simulate_delay": simulate_delay,
        "metrics.port": metrics_port,
        "trust.accept_any_learner": insecure_accept_any_learner or None,
        "public_name": public_name,
        **network_flags(initial_peers, host_maddrs, announce_maddrs, identity_path, startup_timeout),
    }
    cfg, card = config_and_card(invite, config, set_, flags)
    check_public_name(cfg)
    if not cfg.network.initial_peers:
        fail("join needs --initial-peers (the address `swarmnode bootstrap` prints)")
    from swarmnode.config.trust import check_trust_root
    from swarmnode.node.preflight import check_node, check_peer_addresses, check_ports

    check_ports(cfg.network.host_maddrs)
    if card is not None and not idle:
        from swarmnode.node.invite import check_sources

        check_sources(cfg, card)  # the run's model and task data, not only its settings
    if not idle:
        check_node(cfg)  # task, engine, model: before the swarm hears of this node
    check_peer_addresses(cfg)
    if not idle:
        check_trust_root(cfg)
    from swarmnode.identity import identity_for
    from swarmnode.node.idle import run_idle
    from swarmnode.node.join import run_node

    identity = identity_for(cfg, "identity.key")
    if idle:
        run_node_command(lambda stop: run_idle(cfg, identity, cfg.role, stop, emit=emit, card=card))
    else:
        run_node_command(lambda stop: run_node(cfg, identity, stop, emit=emit, card=card))


def identity(
    identity_path: str = typer.Option(..., "--identity-path", help="the key file (created if missing)"),
) -> None:
    """Print the peer id of an identity key file: what samplers list in trust.learner_keys for a learner."""
    from swarmnode.identity import Identity

    typer.echo(Identity.load_or_create(identity_path).peer_id)


def bootstrap(
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    as_json: bool = JsonOpt,
    host_maddrs: list[str] | None = HostOpt,
    announce_maddrs: list[str] | None = AnnounceOpt,
    identity_path: str | None = IdentityOpt,
    startup_timeout: float | None = StartupOpt,
    initial_peers: list[str] | None = PeersOpt,
    log_interval: float = typer.Option(30.0, "--log-interval", min=0.1, help="seconds between health logs"),
    metrics_port: int | None = MetricsPortOpt,
    card: str | None = typer.Option(None, "--card", hidden=True, help="keep this run card file in the DHT"),
) -> None:
    """Host a long-lived bootstrap DHT peer for a run."""
    cfg = config_from_cli(
        config,
        set_,
        **{"metrics.port": metrics_port},
        **network_flags(
            initial_peers, host_maddrs or BOOTSTRAP_MADDRS, announce_maddrs, identity_path, startup_timeout
        ),
    )
    from swarmnode.node.preflight import check_peer_addresses, check_ports

    check_peer_addresses(cfg)
    check_ports(cfg.network.host_maddrs)
    from swarmnode.identity import identity_for
    from swarmnode.node.bootstrap import run_bootstrap

    identity = identity_for(cfg, "bootstrap.key")
    card_path = Path(card) if card else None
    run_node_command(
        lambda stop: run_bootstrap(
            cfg, identity, stop, as_json=as_json, log_interval=log_interval, emit=emit, card=card_path
        )
    )


def host(
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    host_maddrs: list[str] | None = typer.Option(
        None,
        "--host-maddrs",
        help="the bootstrap's listen multiaddr(s), repeatable (default: the config's, or port 31337)",
    ),
    owner_key: str | None = typer.Option(
        None,
        "--owner-key",
        help="the run owner's key file (created if missing; default <data dir>/owner.key): it signs the run card",
    ),
    bootstrap_only: bool = typer.Option(
        False,
        "--bootstrap-only",
        help="start the bootstrap and publish the card only (the learner joins elsewhere; needs trust.learner_keys)",
    ),
    public_name: str | None = PublicNameOpt,
    update: bool = typer.Option(
        False,
        "--update",
        help="sign the next card version with the --set shared "
        "settings changed; the running nodes take it within two heartbeats",
    ),
) -> None:
    """Host a run: a bootstrap and a learner, the run's signed card, and one invite line (`swarmnode join ...`)."""
    set_ = cli_sets(set_, public_name=public_name)  # the learner's name (and the bootstrap's)
    cfg = config_from_cli(config, set_)
    check_public_name(cfg)
    from swarmnode.node.host import default_owner_key, run_host, update_card

    key = Path(owner_key).expanduser() if owner_key else default_owner_key()
    if update:
        update_card(config, list(set_ or []), key, emit)
        return
    maddrs = host_maddrs or (
        cfg.network.host_maddrs if "host_maddrs" in cfg.network.model_fields_set else BOOTSTRAP_MADDRS
    )
    from swarmnode.node.preflight import check_ports

    check_ports(maddrs)
    run_host(config, list(set_ or []), owner_key=key, bootstrap_only=bootstrap_only, bootstrap_maddrs=maddrs, emit=emit)
