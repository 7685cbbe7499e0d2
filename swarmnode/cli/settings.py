"""From the command line to a node's config: `--config` and `--set`, the flags given, an invite's run card; each
mistake ends the command with one line (`fail`) before any heavy import."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

from swarmnode.config import NodeConfig, load_config
from swarmnode.config.addresses import check_initial_peers
from swarmnode.config.compat import held_warnings
from swarmnode.errors import ExitCode, SwarmnodeError

BOOTSTRAP_MADDRS = ["/ip4/0.0.0.0/tcp/31337", "/ip4/0.0.0.0/udp/31337/quic-v1"]


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    """End the command with one error line and `code` (printed by `main`)."""
    raise SwarmnodeError(message, exit_code=code)


def config_from_cli(config: str | None, overrides: list[str] | None, **extra: Any) -> NodeConfig:
    """Load the config, then apply `--set` overrides and any command-line flags given (not None); a malformed
    initial peer fails here too, before any heavy import."""
    with held_warnings():  # a config mistake or a missing model is said first, and alone
        cfg = load_config(config, cli_sets(overrides, **extra))
        check_initial_peers(cfg.network.initial_peers)
        model = Path(cfg.model.name).expanduser()
        if cfg.model.name.startswith((".", "/", "~")) and not model.is_dir():
            fail(f"model.name {cfg.model.name!r}: no such directory", ExitCode.MISSING)
    return cfg


def cli_sets(overrides: list[str] | None, **extra: Any) -> list[str]:
    """`--set` overrides plus one `key=value` per command-line flag given (not None)."""
    sets = list(overrides or [])
    for key, value in extra.items():
        if value is None or value == []:
            continue
        sets.append(f"{key}={json.dumps(value)}")
    return sets


def network_flags(
    initial_peers=None, host_maddrs=None, announce_maddrs=None, identity_path=None, startup_timeout=None
) -> dict[str, Any]:
    """The network flags as config keys (`network.initial_peers` ...), None where not given."""
    return {
        "network.initial_peers": initial_peers,
        "network.host_maddrs": host_maddrs,
        "network.announce_maddrs": announce_maddrs,
        "network.identity_path": identity_path,
        "network.startup_timeout": startup_timeout,
    }


def check_public_name(cfg) -> None:
    """The node's public name against the run's `names` policy: one line (exit code 2) before anything starts."""
    from swarmnode.protocol.public_name import NamePolicy
    from swarmnode.protocol.public_name import check_public_name as check

    check(cfg.public_name, NamePolicy.of(cfg.names))


def invite_config(invite: str, config: str | None, sets: list[str]):
    """The node's config and the run card from an invite (`swarmnode.node.invite.config_for_invite`). A damaged
    invite or a bad --config/--set answers first, before the dial's modules (hivemind, torch) are imported."""
    from swarmnode.protocol.run_card import Invite

    Invite.parse(invite)
    load_config(config, sets)
    from swarmnode.node.invite import config_for_invite

    return config_for_invite(invite, config, sets)


def config_and_card(invite: str | None, config: str | None, set_: list[str] | None, flags: dict):
    """(config, run card) from an invite, or (config, None) from --config/--set and the flags alone."""
    if invite is not None:
        return invite_config(invite, config, cli_sets(set_, **flags))
    return config_from_cli(config, set_, **flags), None


def client_config(command: str, config, set_, initial_peers, host_maddrs, startup_timeout, invite=None):
    """The config of a read-only client command (status, dashboard): loopback listener unless told otherwise; with
    an invite, the run's card too (config and card; card None without one)."""
    flags = network_flags(initial_peers, host_maddrs or ["/ip4/127.0.0.1/tcp/0"], None, None, startup_timeout)
    cfg, card = config_and_card(invite, config, set_, flags)
    if not cfg.network.initial_peers:
        fail(f"{command} needs an invite or --initial-peers (the address `swarmnode bootstrap` prints)")
    from swarmnode.node.preflight import check_peer_addresses

    check_peer_addresses(cfg)
    return cfg, card
