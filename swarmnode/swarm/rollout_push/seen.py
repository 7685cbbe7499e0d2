"""The receiver's memory of accepted group ids: bounded, optionally journaled so a restart stays exactly-once."""

from __future__ import annotations

import collections
from pathlib import Path

from swarmnode.atomic import replacing

ID_LINE_BYTES = 65  # one journal line: a group id (64 hex digits) and its newline


def journal_bytes_at_most(capacity: int, batch: int) -> int:
    """The journal's largest size: it is rewritten with the `capacity` ids remembered once it holds more than twice
    that many lines, which the last `batch` of ids written may pass."""
    return (2 * capacity + batch) * ID_LINE_BYTES


class SeenIds:
    """Bounded set of accepted group ids, optionally journaled to disk so a restarted receiver stays exactly-once."""

    def __init__(self, capacity: int, journal: str | Path | None = None):
        self.capacity = capacity
        self._ids: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._file = None
        self._path: Path | None = None
        self._lines = 0
        if journal is not None:
            path = self._path = Path(journal)
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                data = path.read_bytes()
                complete = data[: data.rfind(b"\n") + 1]  # a crash may have cut the last line
                if len(complete) != len(data):
                    with open(path, "r+b") as f:
                        f.truncate(len(complete))
                lines = complete.decode(errors="replace").splitlines()
                self._lines = len(lines)
                for line in lines[-capacity:]:
                    self._remember(line)
            self._file = open(path, "a", buffering=1)

    def __contains__(self, group_id: str) -> bool:
        return group_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, group_id: str) -> None:
        self.add_many([group_id])

    def add_many(self, group_ids: list[str]) -> None:
        """Remember `group_ids` (journaled with one write)."""
        for group_id in group_ids:
            self._remember(group_id)
        if self._file is not None:
            self._file.write("".join(i + "\n" for i in group_ids))
            self._file.flush()
            self._lines += len(group_ids)
            if self._lines > 2 * self.capacity:
                self._compact()

    def _compact(self) -> None:
        """Rewrite the journal with only the ids still remembered (atomic rename)."""
        assert self._path is not None and self._file is not None
        with replacing(self._path, tmp=self._path.with_suffix(".tmp")) as part:
            part.write_text("".join(i + "\n" for i in self._ids))
            self._file.close()
        self._file = open(self._path, "a", buffering=1)
        self._lines = len(self._ids)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _remember(self, group_id: str) -> None:
        self._ids[group_id] = None
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
