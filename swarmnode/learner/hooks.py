"""What a node wires into its learner, given to `LearnerLoop` at construction: callbacks and the group journal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _any_group(group: Any) -> bool:
    return True


@dataclass
class LearnerHooks:
    """`on_step(diagnostics)`: each trained step, before any checkpoint; `on_poisoned(group, reason)`: a group
    that poisoned a step or lied about its log-probs (its sender is to be struck); `on_publish(version)`: each
    version as its weights are snapshotted (in the learner's thread); `checkable(group)`: whether the spot checks
    may judge a group; `extra_state()`: the caller's state, checkpointed with the learner's (what was restored is
    `LearnerLoop.restored_extra`); `journal`: a GroupJournal of acknowledged groups, compacted after every
    checkpoint (and asking for an early one when it grows past its soft limit)."""

    on_step: Callable[[dict], None] | None = None
    on_poisoned: Callable[[Any, str], None] | None = None
    on_publish: Callable[[int], None] | None = None
    checkable: Callable[[Any], bool] = _any_group
    extra_state: Callable[[], dict[str, Any]] | None = None
    journal: Any = None  # a swarmnode.learner.journal.GroupJournal
