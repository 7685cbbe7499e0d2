"""The learner's steps file: one JSON line per trained step, in the node's data directory (the demo and the
restart tests read it). Kept apart from the loop so readers need no torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STEPS_FILE = "learner_steps.jsonl"
STEPS_FILE_MAX_BYTES = 64 << 20  # then it becomes <name>.1 (replacing the previous one): at most ~2x on disk


class StepsLog:
    """Appends step records to `<data_dir>/learner_steps.jsonl`, flushed per line, rotated past `max_bytes`."""

    def __init__(self, data_dir: Path, max_bytes: int = STEPS_FILE_MAX_BYTES) -> None:
        self.path, self.max_bytes = Path(data_dir) / STEPS_FILE, max_bytes
        self._file = self._open()

    def _open(self):
        """The file opened for appending; if it is over `max_bytes` it is first moved to `<name>.1`."""
        if self.path.exists() and self.path.stat().st_size > self.max_bytes:
            self.path.replace(self.path.with_name(self.path.name + ".1"))
        return self.path.open("a")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._file.tell() > self.max_bytes:
            self._file.close()
            self._file = self._open()

    def close(self) -> None:
        self._file.close()
