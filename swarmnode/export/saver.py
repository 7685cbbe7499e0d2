"""Saving and pushing while training: every `learner.save_every` versions a learner writes the newest version its
weight store holds as a model directory (`command.export_version`: the same directory `swarmnode export` writes)
under `learner.save_dir` (default `<data dir>/exports`) as `v<version>`, keeps the last `learner.save_total_limit`
of them, and with `learner.push_to_hub` uploads each one to `learner.hub_model_id`, the version in the commit
message. The work runs on a thread of its own, one save at a time (a version due while one is written waits for
the next multiple); any failure (a full disk, no network, no token, a rejected repo) is one line through `emit`
and training goes on."""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from swarmnode.config import LearnerConfig, NodeConfig
from swarmnode.errors import SwarmnodeError
from swarmnode.export.command import export_version
from swarmnode.export.hub import push_dir
from swarmnode.export.run_info import read_run_info
from swarmnode.export.versions import read_version
from swarmnode.protocol.run_card import RunCard
from swarmnode.swarm.weights import WeightStore

SAVE_DIR = "exports"
_NAME = re.compile(r"^v(\d+)$")


def save_dir(lc: LearnerConfig, data_dir: Path) -> Path:
    """Where a learner's saved directories go (`learner.save_dir`, or `<data dir>/exports`)."""
    return Path(lc.save_dir).expanduser() if lc.save_dir else Path(data_dir) / SAVE_DIR


def saved_versions(root: Path) -> list[int]:
    """The versions saved under `root`, oldest first (temporary directories of a save in progress left out)."""
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if p.is_dir() and (m := _NAME.match(p.name)))


class VersionSaver:
    """See the module docstring. `poll()` after each step; `close()` waits for a save in progress."""

    def __init__(
        self,
        cfg: NodeConfig,
        data_dir: Path,
        store: WeightStore,
        emit: Callable[[str], None],
        card: RunCard | None = None,
    ) -> None:
        self.cfg, self.store, self.emit, self.card, self.data_dir = cfg, store, emit, card, Path(data_dir)
        self.every = cfg.learner.save_every
        self.root = save_dir(cfg.learner, data_dir)
        held = saved_versions(self.root)
        self.last = held[-1] if held else -1  # the newest version saved (a restart goes on above it)
        self._thread: threading.Thread | None = None
        self.saved: list[int] = []
        self.pushed: list[int] = []
        self.failures = 0

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def due(self) -> int | None:
        """The newest held version when it is in a later block of `save_every` versions than the last save (the
        first block, from version 0, is the base model: not saved)."""
        newest = self.store.latest()
        if not self.enabled or newest is None:
            return None
        block = newest // self.every
        if block == 0 or (self.last >= 0 and block <= self.last // self.every):
            return None
        return newest

    def poll(self) -> None:
        """Start saving the due version, unless a save is still running."""
        if self._thread is not None and self._thread.is_alive():
            return
        version = self.due()
        if version is None:
            return
        self.last = version
        self._thread = threading.Thread(target=self.save, args=(version,), name="version-saver", daemon=True)
        self._thread.start()

    def save(self, version: int) -> None:
        """Write version `version`, apply the retention, push; every failure one line."""
        out = self.root / f"v{version}"
        try:
            found = read_version(self.store, version, f"this learner's store ({self.store.root})")
            info = read_run_info(self.data_dir) if self.card is None else None  # the card, if it joined by invite
            card = self.card or (info.card if info else None)
            export_version(found, out, self.cfg, card, replace=True, check_base_weights=False)
        except (SwarmnodeError, OSError, RuntimeError, ValueError) as exc:
            self.failures += 1
            self.emit(f"save: version {version} not saved to {out}: {exc}; training goes on")
            return
        self.saved.append(version)
        removed = self.prune()
        self.emit(
            f"save: version {version} written to {out}"
            + (f" (removed {', '.join(f'v{v}' for v in removed)})" if removed else "")
        )
        if self.cfg.learner.push_to_hub:
            self.push(out, version)

    def prune(self) -> list[int]:
        """Remove all but the last `save_total_limit` saved directories; the versions removed."""
        held = saved_versions(self.root)
        drop = held[: max(0, len(held) - self.cfg.learner.save_total_limit)]
        for v in drop:
            shutil.rmtree(self.root / f"v{v}", ignore_errors=True)
        return drop

    def push(self, out: Path, version: int) -> None:
        repo = self.cfg.learner.hub_model_id
        try:
            url = push_dir(out, repo, self.cfg.run_id, version)
        except SwarmnodeError as exc:
            self.failures += 1
            self.emit(f"push: {exc}; training goes on")
            return
        self.pushed.append(version)
        self.emit(f"push: version {version} pushed to {repo} ({url})")

    def close(self, timeout: float = 120.0) -> None:
        """Wait for a save in progress (its directory is whole, or not there)."""
        if self._thread is not None:
            self._thread.join(timeout)
