"""The node's own health on its own disk: `<data_dir>/health.json`, what `swarmnode status --self` reads.

A working node (sampler or learner) rewrites it atomically at most every `WRITE_EVERY_S` seconds (on its
heartbeat and after its steps): who it is (pid, peer id, role, run), when it wrote, its health record (the same
fields /metrics shows, `swarmnode.observe.health_record`), and a short history of its work counter (groups
acknowledged for a sampler, steps for a learner), one point per `HISTORY_EVERY_S` over the last hour and the
latest last, from which the reader tells "contributing" from "idle". Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmnode.atomic import write_atomic

FILE_NAME = "health.json"
WRITE_EVERY_S = 5.0
HISTORY_EVERY_S = 30.0
HISTORY_S = 3600.0


class SelfRecord:
    """Writes a node's `health.json` (see the module docstring). `work` reads the node's work counter."""

    def __init__(
        self,
        data_dir: str | Path,
        *,
        peer_id: str,
        role: str,
        run_id: str,
        heartbeat: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self.clock = clock
        self.head = {
            "pid": os.getpid(),
            "peer_id": peer_id,
            "role": role,
            "run_id": run_id,
            "heartbeat": heartbeat,
            "started_at": clock(),
        }
        self.history: deque[tuple[float, float, float]] = deque()  # (time, sent, work)
        self.extra: dict[str, Any] = {}  # role-specific facts the reader uses (waiting for credit, ...)
        self.counters: tuple[float, float, float] = (round(clock(), 1), 0.0, 0.0)  # the latest (time, sent, work)
        self._written = -float("inf")

    def update(
        self, health: dict[str, Any], *, sent: float | None = None, work: float | None = None, force: bool = False
    ) -> bool:
        """Note the counters and rewrite the file if `WRITE_EVERY_S` passed (or `force`); True when written."""
        now = self.clock()
        if work is not None:
            self.counters = (round(now, 1), float(sent or 0), float(work))
            if not self.history or now - self.history[-1][0] >= HISTORY_EVERY_S:
                self.history.append(self.counters)
                while self.history and now - self.history[0][0] > HISTORY_S + HISTORY_EVERY_S:
                    self.history.popleft()
        if not force and now - self._written < WRITE_EVERY_S:
            return False
        self._written = now
        doc = {
            **self.head,
            "written_at": now,
            "health": health,
            "history": [*self.history, self.counters],
            **self.extra,
        }
        try:
            write_atomic(self.path, json.dumps(doc), tmp=self.path.with_name(f".{FILE_NAME}.{os.getpid()}.tmp"))
        except OSError:  # a full disk: the record goes stale, which the reader reports (with the disk's line)
            return False
        return True


def read_self_record(data_dir: str | Path) -> dict[str, Any] | None:
    """The node's last `health.json` in `data_dir`, or None when there is none (or it does not parse)."""
    try:
        doc = json.loads((Path(data_dir) / FILE_NAME).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
