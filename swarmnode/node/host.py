"""`swarmnode host`: start a run in one command and print the invite that joins it.

The host creates the run owner's key if it is missing (`<SWARMNODE_HOME>/owner.key`, or `--owner-key`), starts a
bootstrap (a child `swarmnode bootstrap` that keeps the run card in the DHT) and, unless `--bootstrap-only`, a
learner (a child `swarmnode join <invite> --role learner` whose key is the card's designated learner). The card
(`swarmnode.protocol.run_card`) holds the shared settings of `--config`/`--set`; the invite goes to stdout as one
`swarmnode join swarmnode1:...` line and to `<host dir>/invite.txt`. The children's output follows on stdout, each
line prefixed with its node's name; Ctrl-C or SIGTERM stops the learner first, then the bootstrap. A restarted
host keeps its bootstrap's key and port (`HostFiles.pinned`), so its card and invite: the nodes joined by it find
the run again.

`swarmnode host --update --config PRESET --set key=value` signs the next version of the card with the shared
settings changed (a learner key added, a staleness bound) and writes it where the running bootstrap reads it: it
reaches the DHT within a heartbeat, and the run's nodes within another.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import yaml

from swarmnode.atomic import write_atomic
from swarmnode.config import NodeConfig, apply_override, build_config, default_data_dir, load_config_data
from swarmnode.config.shared import carried_defaults, describe, diff, is_shared, local_part, shared_settings
from swarmnode.errors import InUseError, SwarmnodeError, UsageError
from swarmnode.identity import Identity
from swarmnode.model.sources import source_digests
from swarmnode.node.card_server import read_card_file
from swarmnode.node.invite import merge, with_task_file
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.run_card import Invite, RunCard

Emit = Callable[[str], None]
LEARNER_STOP_S = 120.0  # the learner's final checkpoint on a loaded machine
BOOTSTRAP_STOP_S = 15.0


class HostError(SwarmnodeError):
    """A host that could not start its run or keep it up; the message says which node and why."""


@dataclass(frozen=True)
class HostFiles:
    """Where a host keeps one run's keys, card and invite: `<SWARMNODE_HOME>/host/<run id>/`."""

    root: Path

    @classmethod
    def of(cls, run_id: str) -> HostFiles:
        return cls(default_data_dir() / "host" / run_id)

    card = property(lambda self: self.root / "card.json")
    invite = property(lambda self: self.root / "invite.txt")
    learner_key = property(lambda self: self.root / "learner.key")
    bootstrap_key = property(lambda self: self.root / "bootstrap.key")
    learner_local = property(lambda self: self.root / "learner-local.yaml")
    bootstrap_ports = property(lambda self: self.root / "bootstrap-ports.json")

    def pinned(self, maddrs: list[str]) -> list[str]:
        """`maddrs` with each any-port listener (`/tcp/0`) on the port it got at the last start, so a restarted
        host keeps its bootstrap's address, its card and its invite."""
        try:
            chosen = json.loads(self.bootstrap_ports.read_text())
        except (OSError, ValueError):
            chosen = {}
        return [chosen.get(m, m) if isinstance(chosen, dict) else m for m in maddrs]

    def pin(self, maddrs: list[str], addresses: list[str]) -> None:
        """Remember the port each any-port listener of `maddrs` got (read from the bootstrap's `addresses`)."""
        chosen = {m: got for m in maddrs if (got := chosen_port(m, addresses)) is not None}
        if chosen:
            self.bootstrap_ports.write_text(json.dumps(chosen, indent=1, sort_keys=True) + "\n")


def chosen_port(maddr: str, addresses: list[str]) -> str | None:
    """`maddr` (a listener on port 0) with the port the bootstrap printed for it in `addresses`, or None."""
    parts = maddr.rstrip("/").split("/")  # ['', 'ip4', HOST, 'tcp', PORT, ...]
    if len(parts) < 5 or parts[4] != "0":
        return None
    anywhere = parts[2] in ("0.0.0.0", "::")
    for address in addresses:
        got = address.split("/p2p/")[0].rstrip("/").split("/")
        same = got[:2] == parts[:2] and (anywhere or got[2:3] == parts[2:3]) and got[5:] == parts[5:]
        if len(got) >= 5 and same and got[3] == parts[3] and got[4].isdigit():
            return "/".join([*parts[:4], got[4], *parts[5:]])
    return None


def default_owner_key() -> Path:
    return default_data_dir() / "owner.key"


def next_card(cfg: NodeConfig, owner: Identity, bootstraps: list[str], previous: RunCard | None) -> RunCard:
    """The card for `cfg` served from `bootstraps`: the previous one when nothing changed, else its next version."""
    card = RunCard(
        run_id=cfg.run_id,
        version=1,
        owner=owner.peer_id,
        bootstraps=list(bootstraps),
        settings=shared_settings(cfg),
        defaults=carried_defaults(cfg),
        sources=source_digests(cfg.model, cfg.task),
    )
    if previous is not None and previous.owner == owner.peer_id:
        if (previous.settings, previous.bootstraps, previous.defaults, previous.sources) == (
            card.settings,
            card.bootstraps,
            card.defaults,
            card.sources,
        ):
            return previous
        card.version = previous.version + 1
    return card.signed(owner)


def _previous_card(files: HostFiles) -> RunCard | None:
    try:
        return read_card_file(files.card)
    except (OSError, InvalidRecord):
        return None


def write_card(files: HostFiles, card: RunCard) -> None:
    """Write the card file atomically (the bootstrap may read it at any moment) and the invite beside it."""
    files.root.mkdir(parents=True, exist_ok=True)
    write_atomic(files.card, card.to_file(), tmp=files.card.with_suffix(".tmp"))
    files.invite.write_text(f"swarmnode join {Invite.of(card).encode()}\n")


def update_card(spec: str | None, sets: list[str], owner_key: Path, emit: Emit) -> RunCard:
    """`host --update`: the next card version with `sets` applied to the shared settings (local keys refused)."""
    key_of = lambda item: item.partition("=")[0].strip()  # noqa: E731
    naming = [item for item in sets if key_of(item) == "run_id"]  # which run: not a change
    sets = [item for item in sets if key_of(item) != "run_id"]
    local = [key_of(item) for item in sets if not is_shared(key_of(item))]
    if local or not sets:
        raise UsageError(
            f"host --update changes the run's shared settings only (--set key=value); "
            f"{', '.join(local) or 'none given'}: not in the card"
        )
    cfg = build_config(load_config_data(spec, naming))
    files = HostFiles.of(cfg.run_id)
    previous = _previous_card(files)
    if previous is None:
        raise UsageError(f"no run card of run {cfg.run_id} at {files.card}: start the run with `swarmnode host` first")
    owner = Identity.load(owner_key)
    if previous.owner != owner.peer_id:
        raise UsageError(f"the card at {files.card} is signed by {previous.owner}, not by the key {owner_key}")
    data = {**json.loads(json.dumps(previous.settings)), "run_id": cfg.run_id}
    for item in sets:  # applied to the card's settings, not the preset's
        apply_override(data, item)
    settings = shared_settings(build_config(with_task_file(data)))
    if settings == previous.settings:
        emit(f"run card v{previous.version}: no setting changed")
        return previous
    changes = diff(previous.settings, settings)
    sources = previous.sources  # the model's and data's digests change only with the model or the task
    if any(key.startswith(("model.", "task.")) for key, _, _ in changes):
        own = local_part(load_config_data(spec, naming))
        merged = build_config(with_task_file(merge(data, own)))
        sources = source_digests(merged.model, merged.task)
    card = RunCard(
        run_id=cfg.run_id,
        version=previous.version + 1,
        owner=owner.peer_id,
        bootstraps=previous.bootstraps,
        settings=settings,
        defaults=previous.defaults,
        sources=sources,
    ).signed(owner)
    write_card(files, card)
    emit(
        f"run card v{card.version}: {describe(changes) or 'no setting changed'} (the run's nodes take it within "
        "two heartbeats)"
    )
    return card


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the host dies, even by SIGKILL (Linux prctl)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


class Child:
    """A `swarmnode` child process whose output lines are handed to `on_line` (from a reader thread)."""

    def __init__(self, name: str, args: list[str], on_line: Callable[[str, str], None]):
        self.name = name
        self.popen = subprocess.Popen(
            [sys.executable, "-P", "-m", "swarmnode", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(self.popen.stdout, on_line), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[bytes], on_line: Callable[[str, str], None]) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            on_line(self.name, line)

    def stop(self, grace: float) -> None:
        """SIGTERM, then SIGKILL of its process group after `grace` seconds."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # its p2pd too, if it outlived it
        except (ProcessLookupError, PermissionError):
            pass
        self.popen.wait()
        self._reader.join(timeout=5)


class _Stop(Exception):
    """SIGTERM reached the host."""


def _wait_for_addresses(child: Child, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(line.startswith("ready ") for line in child.lines):
            return [line.split(": ", 1)[1] for line in child.lines if line.startswith("initial-peers: ")]
        if child.popen.poll() is not None:
            break
        time.sleep(0.1)
    tail = " | ".join(child.lines[-3:]) or "no output"
    raise HostError(f"the bootstrap did not start ({tail})")


def _keep_ports(files: HostFiles, maddrs: list[str], emit: Emit) -> list[str]:
    """The bootstrap's listen addresses: those of its last start (`HostFiles.pinned`) while their ports are free;
    a port taken meanwhile is given up, and the line says the invite changes."""
    from swarmnode.node.preflight import check_ports

    pinned = files.pinned(maddrs)
    if pinned == maddrs:
        return maddrs
    try:
        check_ports(pinned)
    except InUseError as exc:
        emit(
            f"the bootstrap's address of the last start is taken ({exc}): it listens on a new port, so the card "
            "and the invite change: send the new invite to the run's nodes"
        )
        files.bootstrap_ports.unlink(missing_ok=True)
        return maddrs
    return pinned


def run_host(
    spec: str | None, sets: list[str], *, owner_key: Path, bootstrap_only: bool, bootstrap_maddrs: list[str], emit: Emit
) -> None:
    """`swarmnode host` (see the module docstring): runs until Ctrl-C / SIGTERM or a child fails."""
    own = load_config_data(spec, sets)
    cfg = build_config(own)
    files = HostFiles.of(cfg.run_id)
    files.root.mkdir(parents=True, exist_ok=True)
    owner = Identity.load_or_create(owner_key)
    keys = list(cfg.trust.learner_keys)
    if not bootstrap_only:
        keys.append(Identity.load_or_create(files.learner_key).peer_id)
    elif not keys:
        raise UsageError(
            "host --bootstrap-only needs the run's learner keys: --set trust.learner_keys=[PEER_ID] "
            "(`swarmnode identity --identity-path LEARNER_KEY` prints one)"
        )
    cfg.trust.learner_keys = list(dict.fromkeys(keys))
    lock = threading.Lock()

    def relay(name: str, line: str) -> None:
        with lock:
            emit(f"[{name}] {line}")

    listen = _keep_ports(files, bootstrap_maddrs, emit)
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(_Stop()))
    children: list[Child] = []
    try:
        boot_args = ["bootstrap", "--identity-path", str(files.bootstrap_key), "--card", str(files.card)]
        boot_args += [a for m in listen for a in ("--host-maddrs", m)]
        if spec:
            boot_args += ["--config", spec]
        boot_args += [a for s in sets for a in ("--set", s)]
        children.append(Child("bootstrap", boot_args, relay))
        addresses = _wait_for_addresses(children[0], cfg.network.startup_timeout + 60)
        files.pin(bootstrap_maddrs, addresses)
        card = next_card(cfg, owner, addresses[:16], _previous_card(files))
        write_card(files, card)
        invite = Invite.of(card).encode()
        emit(f"run {cfg.run_id}: card v{card.version} signed by owner {owner.peer_id} ({owner_key})")
        emit(f"invite: swarmnode join {invite}")
        emit(f"invite written to {files.invite}")
        if not bootstrap_only:
            files.learner_local.write_text(yaml.safe_dump(local_part(own)))
            children.append(
                Child(
                    "learner",
                    [
                        "join",
                        invite,
                        "--role",
                        "learner",
                        "--identity-path",
                        str(files.learner_key),
                        "--config",
                        str(files.learner_local),
                    ],
                    relay,
                )
            )
        while True:
            for child in children:
                code = child.popen.poll()
                if code is not None:
                    raise HostError(f"the {child.name} exited with code {code}; the host stops the run")
            time.sleep(0.5)
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        for child in reversed(children):
            child.stop(LEARNER_STOP_S if child.name == "learner" else BOOTSTRAP_STOP_S)


__all__ = ["HostError", "HostFiles", "default_owner_key", "next_card", "run_host", "update_card", "write_card"]
