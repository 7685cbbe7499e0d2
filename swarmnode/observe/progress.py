"""Progress of long transfers for a person: a rich bar on a terminal, a line now and then in logs.

The weight plane reports progress through a plain callback (`swarmnode.swarm.weights.ProgressCallback`:
bytes done, bytes total); this module renders it.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn


@contextlib.contextmanager
def fetch_progress(
    description: str,
    *,
    emit: Callable[[str], None] | None = None,
    interactive: bool | None = None,
    after_s: float = 2.0,
    every_s: float = 10.0,
) -> Iterator[Callable[[int, int], None]]:
    """A progress callback for a person, for downloads that take longer than `after_s`: on a terminal (stderr is
    one, unless `interactive` says otherwise) a rich bar with bytes, rate and time left that goes away when done;
    elsewhere (logs, the demo's prefixed output) a line through `emit` every `every_s` seconds. Quick fetches,
    such as a small model's every few seconds, show nothing."""
    interactive = sys.stderr.isatty() if interactive is None else interactive
    start = time.monotonic()
    last_line = -math.inf
    bar = task = None

    def update(done: int, total: int) -> None:
        nonlocal bar, task, last_line
        now = time.monotonic()
        if now - start < after_s or done >= total:
            return
        if interactive:
            if bar is None:
                bar = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    DownloadColumn(),
                    TransferSpeedColumn(),
                    TimeRemainingColumn(),
                    transient=True,
                )
                bar.start()
                task = bar.add_task(description, total=total)
            bar.update(task, completed=done, total=total)
        elif emit is not None and now - last_line >= every_s:
            last_line = now
            emit(
                f"{description}: {done / 1e6:,.0f} of {total / 1e6:,.0f} MB ({done / total:.0%}) after "
                f"{now - start:.0f} s"
            )

    try:
        yield update
    finally:
        if bar is not None:
            bar.stop()


@contextlib.contextmanager
def count_progress(*, interactive: bool | None = None) -> Iterator[Callable[[str, int, int], None]]:
    """A progress callback `(what, done, total)` for counted work (prompts scored): a rich bar per `what` on stderr
    when it is a terminal, else one line on stderr each time `what` has done another tenth."""
    interactive = sys.stderr.isatty() if interactive is None else interactive
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"))
    tasks: dict[str, Any] = {}
    said: dict[str, int] = {}

    def update(what: str, done: int, total: int) -> None:
        if interactive:
            if what not in tasks:
                if not tasks:
                    bar.start()
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done)
        elif (tenth := 10 * done // max(1, total)) > said.get(what, -1):
            said[what] = tenth
            print(f"{what}: {done}/{total}", file=sys.stderr, flush=True)

    try:
        yield update
    finally:
        if tasks:
            bar.stop()
