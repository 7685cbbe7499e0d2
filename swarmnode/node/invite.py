"""Joining by invite: fetch the run's card, check who signed it, build the node's config from it, follow updates.

`config_for_invite(invite, spec, overrides)` dials the invite's bootstraps as a throwaway client, reads the run's
card (`<run>/card`), keeps the newest one signed by the invite's owner, and builds the node's config: the card's
shared settings, the host's suggested local defaults, then this machine's own `--config`/`--set` for local keys.
A shared key set here to another value than the card's is refused (one line naming each key and both values).

`CardWatch` runs beside a node that joined by invite: once per heartbeat it reads the card; a newer version from the
same owner is taken when only followable settings changed (learner keys, the staleness bound, verification; see
`swarmnode.config.shared.FOLLOWABLE`), logged key by key; any other change (the model, the task) makes the node
leave with a message saying what changed. An older version or another key's card is never taken.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from swarmnode.config import NodeConfig, build_config, load_config_data
from swarmnode.config.addresses import check_initial_peers
from swarmnode.config.shared import conflicts, describe, diff, followable, local_part
from swarmnode.errors import ExitCode, SwarmnodeError, UsageError
from swarmnode.identity import Identity
from swarmnode.model.sources import FILE_TASKS, source_differences, source_digests
from swarmnode.protocol.run_card import Invite, RunCard, newest_card
from swarmnode.quiet_log import quiet_logger
from swarmnode.swarm.membership import Membership
from swarmnode.swarm.p2p import SwarmStartError

logger = logging.getLogger(__name__)
FETCH_TIMEOUT_S = 15.0  # an invite whose bootstraps are all down answers within this (or at once when refused)
CARD_WAIT_S = 10.0  # how long a reached bootstrap may take to show the card
RUN_TASK_FILE = "<the run's task file: --set task.path=FILE>"  # a file task's path, until the joiner names its copy


class CardError(SwarmnodeError):
    """The run's card could not be had or does not fit this node; the message says which and what to do."""

    exit_code = ExitCode.NETWORK


def client_config(invite: Invite, timeout: float = FETCH_TIMEOUT_S) -> NodeConfig:
    """The config of a throwaway client that reads the invite's run (loopback listener, no NAT machinery)."""
    check_initial_peers(list(invite.bootstraps))
    return build_config(
        {
            "run_id": invite.run_id,
            "network": {
                "initial_peers": list(invite.bootstraps),
                "host_maddrs": ["/ip4/127.0.0.1/tcp/0"],
                "startup_timeout": timeout,
                "nat_port_map": False,
                "auto_nat": False,
                "use_relay": False,
            },
        }
    )


async def read_card(member: Membership, invite: Invite, above: int = -1) -> RunCard | None:
    """The newest card of the invite's run signed by its owner above version `above`, as the DHT holds now."""
    return newest_card(await member.dht.cards(), invite.owner, invite.run_id, above)


async def fetch_card(invite: Invite, timeout: float = FETCH_TIMEOUT_S) -> RunCard:
    """Dial the invite's bootstraps and return the run's card signed by its owner; CardError (one line) if the
    bootstraps do not answer or hold no such card."""
    cfg = client_config(invite, timeout)
    member = Membership(cfg, Identity.generate(), "client", client_mode=True)
    try:
        with quiet_logger("swarmnode.swarm.p2p"):  # the fetch ends in one line saying what happened
            await member.start()
    except SwarmStartError as exc:
        raise CardError(f"run {invite.run_id}: no bootstrap of the invite answered ({exc})") from None
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CARD_WAIT_S
        while True:
            cards = await member.dht.cards()
            card = newest_card(cards, invite.owner, invite.run_id)
            if card is not None:
                return card
            if loop.time() > deadline:
                others = sorted({c.owner[:16] + "..." for c in cards if c.owner != invite.owner})
                signed = f" (only cards signed by other keys: {', '.join(others)}; refused)" if others else ""
                raise CardError(
                    f"run {invite.run_id}: the bootstraps answered but hold no run card signed by the "
                    f"invite's owner {invite.owner[:16]}...{signed}; ask the host for a fresh invite"
                )
            await asyncio.sleep(1.0)
    finally:
        await member.stop()


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`base` with `top` laid over it, section by section."""
    out = dict(base)
    for key, value in top.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def with_task_file(data: dict[str, Any]) -> dict[str, Any]:
    """Config data of a run whose task reads a file (each machine's own, not in the card), with `RUN_TASK_FILE`
    where this machine names none: `status` and `hardware` never read it; `join` is refused (`check_sources`)."""
    task = data.get("task", {})
    if task.get("name") in FILE_TASKS and not (task.get("path") or task.get("dataset")):
        data = merge(data, {"task": {"path": RUN_TASK_FILE}})
    return data


def config_from_card(card: RunCard, own: dict[str, Any]) -> NodeConfig:
    """This node's config: the card's shared settings over the host's defaults and this machine's own local
    settings (`own`: raw --config/--set data); UsageError naming each shared key `own` sets to another value."""
    mine = build_config(own)  # a bad key or value of the user's own fails as it always does
    clash = conflicts(mine, own, card.settings)
    if own.get("run_id") not in (None, card.run_id):
        clash.insert(0, ("run_id", own["run_id"], card.run_id))
    if clash:
        items = ", ".join(f"{key} {a!r}, run {b!r}" for key, a, b in clash)
        raise UsageError(
            f"your settings differ from the run's (card v{card.version}): {items}; the invite sets "
            "them: drop them from --config/--set"
        )
    data = with_task_file(merge(merge(card.defaults, local_part(own)), card.settings))
    peers = list(dict.fromkeys([*card.bootstraps, *own.get("network", {}).get("initial_peers", [])]))
    data = merge(data, {"run_id": card.run_id, "network": {"initial_peers": peers}})
    return build_config(data)


def config_for_invite(text: str, spec: str | None, overrides: list[str]) -> tuple[NodeConfig, RunCard]:
    """Parse the invite, fetch its card (blocking, seconds) and build the node's config from it."""
    invite = Invite.parse(text)
    own = load_config_data(spec, overrides)
    build_config(own)  # a mistake in the user's own settings answers before any dial
    card = asyncio.run(fetch_card(invite))
    return config_from_card(card, own), card


class SourceMismatch(CardError):
    """This machine's model or task data is not the run's (its digest differs from the card's)."""

    exit_code = ExitCode.USAGE


def check_sources(cfg: NodeConfig, card: RunCard) -> None:
    """SourceMismatch (one line naming what differs) unless this machine's model and task data digests
    (`swarmnode.model.sources`) equal the card's; a digest the card or this machine lacks is not compared."""
    if cfg.task.path == RUN_TASK_FILE:
        raise SourceMismatch(
            f"run {card.run_id}'s task reads its problems from a JSONL file on each machine: get "
            "the run's file from its host and add --set task.path=FILE"
        )
    differ = source_differences(card.sources, source_digests(cfg.model, cfg.task))
    if differ and all(d.startswith(("task package", "reward module")) for d in differ):
        raise SourceMismatch(f"this machine's task code is not the run's (card v{card.version}): {'; '.join(differ)}")
    if differ:
        where = f" (task.path {cfg.task.path})" if cfg.task.path and any("task data" in d for d in differ) else ""
        raise SourceMismatch(
            f"this machine's model or data is not the run's (card v{card.version}): "
            f"{'; '.join(differ)}{where}; get the run's files from its host"
        )


def card_software(software: str, card: RunCard) -> str:
    """The record's `software` field with the card version this node runs and the last 8 characters of its owner's
    peer id (`swarmnode/0.1.0 card/3/AbCdEfGh`), so `status` tells a card of another owner from the run's."""
    return f"{software.split(' card/')[0]} card/{card.version}/{card.owner[-OWNER_TAIL:]}"


OWNER_TAIL = 8  # characters of the card owner's peer id a record names


class CardWatch:
    """Follows a running node's card (see the module docstring). `on_change(changes)` tells the role."""

    def __init__(
        self,
        cfg: NodeConfig,
        card: RunCard,
        member: Membership,
        emit: Callable[[str], None],
        on_change: Callable[[list[tuple[str, Any, Any]]], None] | None = None,
    ):
        self.cfg, self.card, self.member, self.emit, self.on_change = cfg, card, member, emit, on_change
        self.invite = Invite.of(card)
        self.left: str | None = None  # why the node leaves (a change it cannot follow)
        member.update(software=card_software(member.fields.get("software", ""), card))

    async def run(self, stop: asyncio.Event) -> None:
        """Check once per heartbeat until `stop`; sets `stop` (and `left`) on a change it cannot follow."""
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), self.cfg.network.heartbeat_interval)
                return
            except TimeoutError:
                pass
            try:
                newer = await read_card(self.member, self.invite, above=self.card.version)
            except Exception as exc:  # a DHT hiccup: next beat
                logger.info("reading the run card failed: %s", exc)
                continue
            if newer is not None and not self.take(newer):
                stop.set()
                return

    def take(self, newer: RunCard) -> bool:
        """Apply `newer` if this node can; False (and `left` says why) if it must leave."""
        changes = diff(self.card.settings, newer.settings)
        if not followable(changes):
            self.left = (
                f"the run's card v{newer.version} changed what this node cannot follow without a restart "
                f"({describe(changes)}); leaving: join again with the invite"
            )
            self.emit(self.left)
            return False
        for key, _, value in changes:
            section, name = key.split(".", 1)
            setattr(getattr(self.cfg, section), name, value)
        added = [b for b in newer.bootstraps if b not in self.cfg.network.initial_peers]
        if added:
            self.cfg.network.initial_peers = [*self.cfg.network.initial_peers, *added]
        self.emit(
            f"run card v{self.card.version} -> v{newer.version}: "
            f"{describe(changes + ([('bootstraps', self.card.bootstraps, newer.bootstraps)] if added else []))}"
            if changes or added
            else f"run card v{newer.version}: no setting changed"
        )
        self.card = newer
        self.member.update(software=card_software(self.member.fields.get("software", ""), newer))
        if self.on_change is not None and changes:
            self.on_change(changes)
        return True


__all__ = [
    "CardError",
    "CardWatch",
    "SourceMismatch",
    "check_sources",
    "config_for_invite",
    "config_from_card",
    "fetch_card",
]
