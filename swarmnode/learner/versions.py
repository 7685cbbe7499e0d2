"""A learner's versions and checkpoints (the `VersionKeeper` part of `LearnerLoop`).

`publish(version, state_dict)` receives a CPU copy of the weights in `model.dtype` (with `publish_in_background`,
from a worker thread that publishes the newest version handed in: `learner.publish_worker`); under LoRA a
published version is adapter-only: `publish(version, adapters, adapter_spec)` gets the adapter tensors and an
`AdapterSpec` naming the base weights by content hash (with `adapter_versions=False`, the base with the adapters
folded in, as full weights). A learner averaging with others takes its versions from the rounds (`adopt_version`).

Versions never go backwards: with `published_path`, every version is recorded there (fsynced) before it is
published (with `publish_in_background`, `RESERVE_VERSIONS` ahead, so one fsync covers several steps; a
checkpoint narrows the record to its own version), and a learner restarted from an older checkpoint goes on above
the highest recorded one. A checkpoint (`learner.checkpoint`) holds the whole state with the LR schedule (under
LoRA the adapters only), written atomically; after each, the group journal (`hooks.journal`) is compacted.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from swarmnode.config import NodeConfig
from swarmnode.diskspace import DiskFullError, SpaceWatch
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.checkpoint import (
    learner_state,
    load_checkpoint,
    restore_learner,
    save_checkpoint,
    write_published,
)
from swarmnode.learner.hooks import LearnerHooks
from swarmnode.learner.lora import adapter_state, is_lora, merged_state
from swarmnode.learner.precision import Precision
from swarmnode.learner.publish_worker import LatestPublisher
from swarmnode.learner.verify import SpotChecker
from swarmnode.protocol.manifest import AdapterSpec

Publish = Callable[..., None]  # (version, state) for full weights; (version, adapters, AdapterSpec) under LoRA
RESERVE_VERSIONS = 8  # versions recorded ahead per fsync when publishing in the background (< max_staleness)


class VersionKeeper:
    """Publishing, snapshots and checkpoints of a learner; `LearnerLoop` sets the state it reads."""

    model: Any  # a torch.nn.Module (a peft one under LoRA)
    cfg: NodeConfig
    optimizer: torch.optim.Optimizer
    scheduler: Any  # a torch LR scheduler
    step_count: int
    rng: random.Random
    rejected: Counter[str]
    buffer: ReplayBuffer
    precision: Precision
    verifier: SpotChecker
    hooks: LearnerHooks
    version: int
    publish: Publish | None
    publisher: LatestPublisher | None
    published: int
    published_path: Path | None
    adapter_spec: AdapterSpec | None
    adapter_versions: bool
    checkpoint_dir: Path | None
    space: SpaceWatch
    restored_extra: dict[str, Any]
    _weights_published: bool

    def _bump_version(self) -> None:
        self.version += 1
        self.buffer.set_version(self.version)
        self.publish_current()

    def adopt_version(self, version: int) -> int:
        """Publish the current weights (just averaged with other learners, or loaded from one) as `version` when
        it is above this learner's own, else as its own + 1 (a number it may have announced is never reused for
        other weights: its versions only go up, and a restart starts above everything it recorded); the version
        published."""
        self.version = max(int(version), self.version + 1)
        self.buffer.set_version(self.version)
        self.publish_current()
        return self.version

    def publish_current(self) -> None:
        """Publish the current weights as the current version; the version is first recorded on disk, so a
        restarted learner never announces a number it announced before."""
        self._weights_published = True
        if self.publish is None:
            return
        if self.published_path is not None and self.version > self.published:
            # recorded ahead: one fsync covers the next `RESERVE_VERSIONS` versions (a background publisher's),
            # a restart goes on above the reservation; `save` narrows it again
            self.published = self.version + (RESERVE_VERSIONS if self.publisher is not None else 0)
            write_published(self.published_path, self.published)
        adapters = self.adapter_snapshot()
        full = self.state_snapshot() if adapters is None or not self.adapter_versions else None
        remembered = adapters if adapters is not None else full
        assert remembered is not None  # without adapters the full weights are taken
        self.verifier.remember(self.version, remembered)
        if self.hooks.on_publish is not None:  # in this thread, while the weights are still this version's
            self.hooks.on_publish(self.version)
        payload = (full,) if full is not None else (adapters, self.adapter_spec)
        if self.publisher is not None:
            self.publisher.submit(self.version, *payload)  # training goes on while it is written
        else:
            self.publish(self.version, *payload)

    def flush_publish(self, timeout: float | None = None) -> bool:
        """Wait until every version handed to the background publisher is published (True at once without one)."""
        return self.publisher.flush(timeout) if self.publisher is not None else True

    def state_snapshot(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the current weights in `model.dtype` (what a full-weight version holds; under LoRA the
        base with the adapters folded in, which a plain model loads)."""
        state = merged_state(self.model) if is_lora(self.model) else self.model.state_dict()
        return self.precision.snapshot(state)

    def adapter_snapshot(self) -> dict[str, torch.Tensor] | None:
        """A CPU copy of the LoRA adapter tensors alone in `model.dtype` (None without LoRA)."""
        if not is_lora(self.model):
            return None
        return self.precision.snapshot(adapter_state(self.model))

    # ---- checkpoints -------------------------------------------------------------------------------------
    def save(self) -> Path | None:
        """Write the checkpoint now (no-op without a checkpoint directory)."""
        if self.checkpoint_dir is None:
            return None
        try:
            path = save_checkpoint(self.checkpoint_dir, learner_state(self))
        except DiskFullError as exc:  # said once; the previous checkpoint and the whole journal stay as they were
            self.space.full("the checkpoint", exc.need)
            return None
        self.space.clear()
        if self.published_path is not None and self.published > self.version:  # nothing above it was announced
            self.published = self.version
            write_published(self.published_path, self.version)  # so a clean restart goes on at this version
        if self.hooks.journal is not None:  # what was trained on is in the checkpoint; the journal keeps the rest
            try:
                self.hooks.journal.compact(lambda: [g.encode() for g in self.buffer.held()])
            except DiskFullError as exc:  # the journal stays whole (a restart trains a few groups twice)
                self.space.full("compacting the group journal", exc.need)
        return path

    @property
    def extra_state(self) -> dict[str, Any]:
        """The caller's state to checkpoint: its `hooks.extra_state()`, else what the checkpoint held."""
        return self.hooks.extra_state() if self.hooks.extra_state is not None else self.restored_extra

    def resume(self) -> bool:
        """Load the checkpoint if there is one; True when resumed (same step and version as saved)."""
        state = load_checkpoint(self.checkpoint_dir) if self.checkpoint_dir is not None else None
        if state is None:
            return False
        restore_learner(self, state)
        return True
