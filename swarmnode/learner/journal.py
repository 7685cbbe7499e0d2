"""The learner's group journal: every group it acknowledged, durable before the ack, replayed after a crash.

An append-only file of records (4-byte big-endian length, 4-byte CRC-32, the group's wire bytes). The receiver
appends an accepted group and awaits `sync` before acknowledging it; `sync` is a group commit (one fsync in a
worker thread covers every append made before it), so acks at tens of groups per second cost one fsync per
batch, not one per group. After every checkpoint the learner `compact`s the journal to the groups its buffer
still holds (atomic rewrite): everything trained on before the checkpoint is in the checkpoint's weights,
everything after it is still in the journal. A restarted learner `replay`s the journal into its buffer, so an
acknowledged group is trained on again after a crash (the training after the checkpoint was lost with the
process) or dropped with a counted reason (stale, quota, ...). A torn or corrupt tail (a crash mid-append) is
cut off and counted.

Bounds: the journal holds at most the groups accepted since the last checkpoint plus the buffer's content;
`over_soft_limit` asks the learner for an early checkpoint, `over_hard_limit` makes the receiver answer "busy"
until one happens. `journal_limits` sets the soft limit so that a crash puts at risk no more groups than the
restarted learner can train again before they age out: replayed groups are drawn first, `prompts_per_step` a
step, and the version moves every `publish_every` steps, so half the staleness window's worth of steps
(`prompts_per_step * publish_every * max_staleness / 2` groups) drains within the window with half of it to
spare for claims that were already stale at the crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from swarmnode.atomic import replacing
from swarmnode.config import LearnerConfig
from swarmnode.diskspace import DiskFullError, raise_if_full
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits

_HEADER = 8
MAX_RECORD_BYTES = 1 << 30


def journal_limits(lc: LearnerConfig, max_staleness: int) -> dict[str, int]:
    """The soft and hard limits (`GroupJournal` arguments) for a learner configured by `lc` under
    `sync.max_staleness`; see the module docstring."""
    drains = lc.prompts_per_step * lc.publish_every * max(1, max_staleness) // 2
    soft = max(2 * lc.prompts_per_step, min(4 * lc.buffer_size, drains))
    return {"soft_limit": soft, "hard_limit": max(16 * lc.buffer_size, 4 * soft)}


class GroupJournal:
    """Append-only journal of acknowledged groups' wire bytes; see the module docstring."""

    def __init__(self, path: str | Path, soft_limit: int = 4096, hard_limit: int = 16384):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.soft_limit, self.hard_limit = soft_limit, hard_limit
        self.torn = 0  # records cut off a damaged tail when the journal was opened
        self._lock = threading.Lock()
        self._records = self._scan_and_repair()
        self._file = open(self.path, "ab")
        self._appended = 0  # appends since start (a sequence number for group commit)
        self._synced = 0
        self._good = (self._file.tell(), self._records)  # size and records as of the last successful sync
        self._lost: list[tuple[int, int]] = []  # (after, upto] appends a failed sync dropped: never acknowledged
        self._sync_lock: asyncio.Lock | None = None

    @property
    def records(self) -> int:
        return self._records

    @property
    def closed(self) -> bool:
        """True once the learner closed the journal (it is stopping: accept nothing more)."""
        return self._file.closed

    @property
    def over_soft_limit(self) -> bool:
        return self._records >= self.soft_limit

    @property
    def over_hard_limit(self) -> bool:
        return self._records >= self.hard_limit

    def append(self, data: bytes) -> None:
        """Write one record (durable once a later `sync` returns)."""
        record = len(data).to_bytes(4, "big") + zlib.crc32(data).to_bytes(4, "big") + data
        with self._lock:
            self._records += 1
            self._appended += 1
            try:
                self._file.write(record)  # buffered: `sync` flushes and fsyncs every append before it at once
            except OSError as exc:  # the buffer spilled onto a full disk
                self._cut_back(exc)

    async def sync(self) -> None:
        """Return once every record appended before this call is on disk (one fsync covers many callers)."""
        target = self._appended
        if self._sync_lock is None:
            self._sync_lock = asyncio.Lock()
        async with self._sync_lock:
            if any(after < target <= upto for after, upto in self._lost):
                raise DiskFullError(f"the group journal {self.path} lost unsynced records (disk full)", self.path)
            if self._synced >= target:
                return
            upto = self._appended
            await asyncio.to_thread(self._fsync)
            self._synced = max(self._synced, upto)

    def _fsync(self) -> None:
        """Flush and fsync every append. A full disk cuts the file back to its last synced size (no record is
        left half written before later ones) and raises `DiskFullError`: the groups of the failed appends are
        answered "busy", never acknowledged, and the sender sends them again."""
        with self._lock:
            if self._file.closed:  # closed: `close` already synced everything appended
                return
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            except OSError as exc:
                self._cut_back(exc)
            self._good = (self._file.tell(), self._records)

    def _cut_back(self, exc: OSError) -> None:
        """After a failed write or sync (under the lock): drop every append since the last sync, cut the file back
        to its synced size, and raise (`DiskFullError` for a full disk)."""
        self._lost = [*self._lost[-7:], (self._synced, self._appended)]
        with contextlib.suppress(OSError):
            self._file.close()  # what it could not write is dropped with the buffer
        os.truncate(self.path, self._good[0])
        self._file = open(self.path, "ab")
        self._records = self._good[1]
        raise_if_full(exc, self.path.parent, "the group journal", 0)
        raise exc

    def compact(self, keep: Callable[[], Iterable[bytes]]) -> None:
        """Atomically replace the journal with exactly the records `keep()` gives (the buffer's held groups;
        called under the journal's lock, so no append falls between that snapshot and the rewrite)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with self._lock:
            count = 0
            try:
                with replacing(self.path, tmp=tmp, durable=True) as part:
                    with open(part, "wb") as fh:
                        for data in keep():
                            fh.write(len(data).to_bytes(4, "big") + zlib.crc32(data).to_bytes(4, "big") + data)
                            count += 1
                    self._file.close()
            except OSError as exc:  # the journal stays as it was (it holds more than needed, never less)
                raise_if_full(exc, self.path.parent, "compacting the group journal", 0)
                raise
            self._file = open(self.path, "ab")
            self._records = count
            self._synced = self._appended  # everything appended so far is either compacted away or rewritten
            self._good = (self._file.tell(), count)

    def replay(self) -> list[bytes]:
        """Every record's bytes, in order (the damaged tail was already cut when the journal was opened)."""
        with self._lock:
            self._file.flush()
            return [data for data, _ in _records(self.path.read_bytes())]

    def replay_into(self, buffer: ReplayBuffer, limits: RolloutLimits) -> Counter[str]:
        """Offer every journaled group to `buffer` again (`readmit`); the outcome of each, counted by reason
        ("ok", "stale", "quota", ..., "unreadable" for a record that no longer decodes)."""
        counts: Counter[str] = Counter()
        seen: set[str] = set()
        for data in self.replay():
            try:
                group = RolloutGroup.decode(data, limits)
            except InvalidRecord:
                counts["unreadable"] += 1
                continue
            if group.group_id in seen:  # appended again right after a compaction kept it
                continue
            seen.add(group.group_id)
            counts[buffer.readmit(group)] += 1
        if self.torn:
            counts["torn"] += self.torn
        return counts

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()

    def _scan_and_repair(self) -> int:
        """Count intact records; truncate a torn or corrupt tail (and count what was cut)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.unlink(missing_ok=True)  # a compaction interrupted before its rename
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        good, end = 0, 0
        for _, stop in _records(data):
            good, end = good + 1, stop
        if end != len(data):
            self.torn = 1
            with open(self.path, "r+b") as fh:
                fh.truncate(end)
                os.fsync(fh.fileno())
        return good


def _records(data: bytes):
    """(payload, end offset) of each intact record from the start; stops at the first damaged one."""
    pos = 0
    while pos + _HEADER <= len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        crc = int.from_bytes(data[pos + 4 : pos + 8], "big")
        body = data[pos + _HEADER : pos + _HEADER + n]
        if n > MAX_RECORD_BYTES or len(body) != n or zlib.crc32(body) != crc:
            return
        pos += _HEADER + n
        yield body, pos
