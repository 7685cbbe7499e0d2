"""Atomic writes, the one way the package replaces a file: write a temporary sibling, then `os.replace` it over the
target, so a reader sees the old file or the new one, never half of one, and a failed write leaves no temporary
file behind. `durable=True` also fsyncs the file before the rename and the directory after it (the rename
survives a power loss): checkpoints, the published-version record, the group journal.

`publish_dir` is the same for a directory built under a temporary name (a converted or built model): the first
of several concurrent builders wins, the others' copies are dropped.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def temp_sibling(path: Path) -> Path:
    """The default temporary name for `path`: hidden, beside it, named after this process."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def fsync_file(path: Path) -> None:
    """Flush `path`'s written data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: str | Path) -> None:
    """Make a rename in `directory` durable."""
    fsync_file(Path(directory))


@contextmanager
def replacing(path: Path, *, tmp: Path | None = None, durable: bool = False) -> Iterator[Path]:
    """Yields the temporary path to write `path`'s new content to; when the block ends without an error, the
    temporary file replaces `path` (fsynced first, and the directory after, when `durable`); on an error it is
    removed and the error raised."""
    tmp = temp_sibling(path) if tmp is None else tmp
    try:
        yield tmp
        if durable:
            fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def write_atomic(path: Path, data: bytes | str, *, tmp: Path | None = None, durable: bool = False) -> None:
    """Replace `path` with `data` (str: UTF-8 text) atomically (`replacing`)."""
    with replacing(path, tmp=tmp, durable=durable) as part:
        if isinstance(data, str):
            part.write_text(data)
        else:
            part.write_bytes(data)


def publish_dir(tmp: Path, out: Path) -> bool:
    """Rename the directory `tmp`, fully built, to `out`; False (and `tmp` removed) when a concurrent builder's
    `out` is already there, which then stands. An `OSError` when the rename fails and there is no `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)
    except OSError:
        if not out.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    return True
