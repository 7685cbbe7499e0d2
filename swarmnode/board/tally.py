"""A learner's tally of what it trained per sampler key over the whole run: groups, completion tokens, first and
last seen, and the groups it refused, by reason.

Fed from the learner's steps (`add_step`: the steps file's own per-sampler fields `sampler_ids`, `sampler_valid`,
`sampler_tokens`, so the tally and the steps file agree) and from refusals at the door (`refuse`). Bounded:
at most `max_keys` keys (a flood of throwaway keys cannot grow it); when a new key arrives at the bound, the key
with the fewest groups trained (the least recently seen among equals) is folded into `rest`. Durable: `save`
writes its state atomically (temporary file, fsync, rename) and `load` reads it back; a damaged file is set
aside and counted, never fatal. Standard library only.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_KEYS = 4096
MAX_REASONS = 8  # refusal reasons kept per key (the rest counted under "other")
MAX_REASON_CHARS = 40


@dataclass
class Contribution:
    """One sampler key's part of the run as one learner saw it."""

    groups: int = 0
    tokens: int = 0
    first: float = 0.0  # wall time of its first group trained or refused
    last: float = 0.0
    refused: Counter[str] = field(default_factory=Counter)

    def seen(self, at: float) -> None:
        self.first = at if not self.first else min(self.first, at)
        self.last = max(self.last, at)

    def refuse(self, reason: str, count: int = 1) -> None:
        reason = reason[:MAX_REASON_CHARS] or "refused"
        if reason not in self.refused and len(self.refused) >= MAX_REASONS:
            reason = "other"
        self.refused[reason] += count

    def as_state(self) -> dict[str, Any]:
        return {"g": self.groups, "t": self.tokens, "f": self.first, "l": self.last, "r": dict(self.refused)}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Contribution:
        return cls(int(state["g"]), int(state["t"]), float(state["f"]), float(state["l"]), Counter(state["r"]))


@dataclass
class Rest:
    """What keys folded out of the tally (past `max_keys`) contributed, together."""

    samplers: int = 0
    groups: int = 0
    tokens: int = 0
    refused: int = 0


class ContributorTally:
    """See the module docstring."""

    def __init__(self, max_keys: int = MAX_KEYS) -> None:
        self.max_keys = max_keys
        self.entries: dict[str, Contribution] = {}
        self.rest = Rest()
        self.damaged = 0  # state files found unreadable at load (set aside as <name>.damaged)

    def _entry(self, peer_id: str) -> Contribution:
        entry = self.entries.get(peer_id)
        if entry is None:
            if len(self.entries) >= self.max_keys:
                self._fold_one()
            entry = self.entries[peer_id] = Contribution()
        return entry

    def _fold_one(self) -> None:
        """Fold the key with the fewest groups (least recently seen among equals) into `rest`."""
        victim = min(self.entries, key=lambda k: (self.entries[k].groups, self.entries[k].last))
        gone = self.entries.pop(victim)
        self.rest.samplers += 1
        self.rest.groups += gone.groups
        self.rest.tokens += gone.tokens
        self.rest.refused += sum(gone.refused.values())

    def add_step(self, record: dict[str, Any]) -> int:
        """Count one step's groups (a steps-file record: `sampler_ids` with `sampler_valid`, `sampler_tokens`
        and `sampler_refused` aligned, `time`); the groups counted."""
        at = float(record.get("time", 0.0))
        ids = record.get("sampler_ids") or []
        valid = record.get("sampler_valid") or [0] * len(ids)
        tokens = record.get("sampler_tokens") or [0] * len(ids)
        counted = 0
        if record.get("trained", 1):
            for peer_id, groups, toks in zip(ids, valid, tokens, strict=False):
                if groups:
                    entry = self._entry(str(peer_id))
                    entry.groups += int(groups)
                    entry.tokens += int(toks)
                    entry.seen(at)
                    counted += int(groups)
        for peer_id, reasons in (record.get("sampler_refused") or {}).items():
            for reason, count in reasons.items():
                self.refuse(str(peer_id), str(reason), int(count), at)
        return counted

    def refuse(self, peer_id: str, reason: str, count: int = 1, at: float = 0.0) -> None:
        """Count `count` groups of `peer_id` refused for `reason`."""
        entry = self._entry(peer_id)
        entry.refuse(reason, count)
        if at:
            entry.seen(at)

    def top(self, n: int) -> list[tuple[str, Contribution]]:
        """The `n` keys with the most groups trained (then tokens, then the earliest seen)."""
        ranked = sorted(self.entries.items(), key=lambda kv: (-kv[1].groups, -kv[1].tokens, kv[1].first, kv[0]))
        return ranked[:n]

    @property
    def groups(self) -> int:
        return sum(e.groups for e in self.entries.values()) + self.rest.groups

    @property
    def tokens(self) -> int:
        return sum(e.tokens for e in self.entries.values()) + self.rest.tokens

    @property
    def refused(self) -> int:
        return sum(sum(e.refused.values()) for e in self.entries.values()) + self.rest.refused

    @property
    def samplers(self) -> int:
        """Keys tallied, those folded into `rest` included."""
        return len(self.entries) + self.rest.samplers

    def as_state(self) -> dict[str, Any]:
        rest = self.rest
        return {
            "format": 1,
            "entries": {k: e.as_state() for k, e in self.entries.items()},
            "rest": [rest.samplers, rest.groups, rest.tokens, rest.refused],
        }

    def load_state(self, state: dict[str, Any]) -> None:
        entries = {str(k): Contribution.from_state(v) for k, v in state["entries"].items()}
        self.entries = dict(list(entries.items())[: self.max_keys])
        self.rest = Rest(*(int(x) for x in state["rest"]))


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write `state` as JSON at `path` atomically and durably (a crash leaves the previous file whole)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        json.dump(state, fh, separators=(",", ":"))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_state(path: Path) -> tuple[dict[str, Any] | None, bool]:
    """(the state at `path` or None, whether a damaged file was found and set aside as `<name>.damaged`)."""
    path.with_name(f".{path.name}.tmp").unlink(missing_ok=True)  # a save a crash interrupted
    if not path.exists():
        return None, False
    try:
        state = json.loads(path.read_text())
        if not isinstance(state, dict):
            raise ValueError("not an object")
        return state, False
    except (OSError, ValueError):
        os.replace(path, path.with_name(path.name + ".damaged"))
        return None, True
