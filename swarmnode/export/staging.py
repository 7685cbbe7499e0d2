"""A directory that appears whole or not at all: written under a hidden temporary name beside its final one
(same filesystem), renamed into place at the end; on any failure the temporary directory is removed, so nothing
half-written that `from_pretrained` could load is ever left under the final name or beside it."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from swarmnode.diskspace import MARGIN_BYTES, DiskFullError, free_bytes, full_message, raise_if_full
from swarmnode.errors import ExitCode
from swarmnode.export.errors import ExportError

PARTIAL_TAG = ".partial-"


def temp_sibling(out: Path, what: str = "partial") -> Path:
    """The hidden temporary sibling of `out` this process writes into."""
    return out.with_name(f".{out.name}.{what}-{os.getpid()}")


def check_room(out: Path, need: int, what: str) -> None:
    """DiskFullError (one line) unless `need` bytes and the margin fit where `out` is written."""
    where = out.parent if out.parent.exists() else Path(".")
    if free_bytes(where) < need + MARGIN_BYTES:
        raise DiskFullError(full_message(where, what, need).split(";")[0], where, need)


def remove_stale_partials(parent: Path) -> None:
    """Remove temporary directories whose writer (the pid in their name) is gone."""
    for path in parent.glob(f".*{PARTIAL_TAG}*"):
        pid = path.name.rpartition("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():  # its writer is gone
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(out: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `out`; on success rename it to `out` (over an older `out` only with
    `replace`), on failure remove it. A full disk becomes `DiskFullError` (one line)."""
    out = Path(out).expanduser().absolute()
    if out.exists() and not replace and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not empty: choose another --out or remove it", exit_code=ExitCode.USAGE)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(out.parent)
    tmp = temp_sibling(out)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            old = temp_sibling(out, "old")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError | RuntimeError):  # safetensors reports a short write as a RuntimeError
            raise_if_full(exc, out.parent, f"the model directory {out.name}", 0)
            if isinstance(exc, RuntimeError) and free_bytes(out.parent) < MARGIN_BYTES:
                raise DiskFullError(f"disk full: {out.parent} ({exc})", out.parent) from exc
        raise
