"""A full disk is a message, not a corruption: the free space of a node's directories, and the one-line notice
when a write has to wait for space.

A node checks before it writes something big (a weight version it fetches or publishes, a checkpoint):
`SpaceWatch.wait_for(need)` is False while the filesystem has less than `need` bytes (plus a margin) free, and
says so once, in one line naming the directory, the space free and the space needed; it says again, once, when
space is back. A write that fails anyway (`is_disk_full(exc)`: ENOSPC, EDQUOT) removes its temporary file and
raises `DiskFullError`, which callers catch like a failed check: what was there before stays intact (every write
here is a temporary file renamed over the old one).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

from swarmnode.errors import SwarmnodeError

MARGIN_BYTES = 1 << 20  # left free beyond what a write needs (manifests, logs, the journal's next records)
Notice = Callable[[str], None]


class DiskFullError(SwarmnodeError, OSError):
    """A write found its filesystem full; the message names the directory and the space it needs."""

    def __init__(self, message: str, directory: Path | None = None, need: int = 0):
        SwarmnodeError.__init__(self, message)
        self.directory, self.need = directory, need


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) is a filesystem out of space or quota."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, DiskFullError) or (
            isinstance(cause, OSError) and cause.errno in (errno.ENOSPC, errno.EDQUOT)
        ):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def free_bytes(path: str | Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path` (its nearest existing parent)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    st = os.statvfs(p)
    return st.f_bavail * st.f_frsize


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def full_message(directory: Path, what: str, need: int, free: int | None = None) -> str:
    """The one line: `disk full: <dir> has X MB free, <what> needs Y MB; ...`."""
    free = free_bytes(directory) if free is None else free
    return (
        f"disk full: {directory} has {mb(free)} free, {what} needs {mb(need + MARGIN_BYTES)}; keeping what it "
        "has and going on when space returns"
    )


def raise_if_full(exc: BaseException, directory: Path, what: str, need: int) -> None:
    """Turn a write's out-of-space OSError into `DiskFullError` (one line); any other error goes on unchanged."""
    if is_disk_full(exc) and not isinstance(exc, DiskFullError):
        raise DiskFullError(full_message(directory, what, need), directory, need) from exc


class SpaceWatch:
    """Whether `directory` has room for the next write, said once per shortage (see the module docstring).

    `notice` gets the one line when a shortage starts and when it ends; `short` holds the current line (None
    while there is room), for the node's health record."""

    def __init__(
        self,
        directory: str | Path,
        notice: Notice,
        *,
        margin: int = MARGIN_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory, self.notice, self.margin, self.clock = Path(directory), notice, margin, clock
        self.short: str | None = None
        self.since: float | None = None

    def wait_for(self, need: int, what: str) -> bool:
        """True when `need` bytes (plus the margin) are free for `what`; else False, said once."""
        free = free_bytes(self.directory)
        if free >= need + self.margin:
            self.clear()
            return True
        self.full(what, need, free)
        return False

    def full(self, what: str, need: int, free: int | None = None) -> None:
        """Record a shortage (a check, or a write that failed with ENOSPC); the line is said once per shortage."""
        if self.short is None:
            self.short = full_message(self.directory, what, need, free)
            self.since = self.clock()
            self.notice(self.short)

    def clear(self) -> None:
        """Space is back: say so once."""
        if self.short is not None:
            waited = self.clock() - (self.since or self.clock())
            self.short, self.since = None, None
            self.notice(
                f"disk space back: {self.directory} has {mb(free_bytes(self.directory))} free after "
                f"{waited:.0f} s; writing again"
            )
