"""`TrackerHub`: a node's trackers behind one bounded queue and one daemon thread.

`report` never waits: it puts the figures on the queue, and a full queue (a tracker slower than the node's steps)
drops the report and counts it (`dropped`). The thread opens each tracker (wandb's start takes a second or so),
then writes every report to each. A tracker that raises, opening or logging, is named once through `emit` and left
out from then on; training never sees the error. `close` drains what is queued (bounded in time) and closes them.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
from collections.abc import Callable

from swarmnode.trackers.base import Tracker

logger = logging.getLogger(__name__)
QUEUE_REPORTS = 256  # reports waiting for the trackers; past it a report is dropped
_CLOSE = None  # the queue's last item

Opener = tuple[str, Callable[[], Tracker]]  # (tracker name, what opens it)


class TrackerHub:
    """See the module docstring. `openers`: (name, callable that opens the tracker) per tracker."""

    def __init__(self, openers: list[Opener], emit: Callable[[str], None], max_queue: int = QUEUE_REPORTS) -> None:
        self.emit = emit
        self.names = [name for name, _ in openers]
        self.active: list[Tracker] = []
        self.failed: dict[str, str] = {}  # tracker name -> the error that took it out
        self.dropped = 0  # reports the full queue refused
        self.logged = 0  # reports handed to the trackers
        self._queue: queue.Queue[tuple[dict[str, float], int] | None] = queue.Queue(max_queue)
        self._openers = openers
        self._thread = threading.Thread(target=self._work, name="trackers", daemon=True)
        self._thread.start()

    def report(self, metrics: dict[str, float], step: int) -> None:
        """Queue `metrics` (non-finite and non-numeric values left out) for step `step`; never blocks."""
        clean = {
            k: float(v)
            for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        }
        if not clean:
            return
        try:
            self._queue.put_nowait((clean, int(step)))
        except queue.Full:
            self.dropped += 1

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (waiting at most `timeout` s), then close every tracker."""
        try:
            self._queue.put(_CLOSE, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _fail(self, name: str, error: BaseException) -> None:
        self.failed[name] = f"{type(error).__name__}: {error}"
        self.emit(f"tracker {name} failed and is off for the rest of the run: {self.failed[name]}")
        logger.debug("tracker %s failed", name, exc_info=error)

    def _work(self) -> None:
        for name, opener in self._openers:
            try:
                self.active.append(opener())
            except (Exception, SystemExit) as error:  # a tracker must never take the node down
                self._fail(name, error)
        while (item := self._queue.get()) is not _CLOSE:
            metrics, step = item
            for tracker in list(self.active):
                try:
                    tracker.log(metrics, step)
                except (Exception, SystemExit) as error:
                    self.active.remove(tracker)
                    self._fail(tracker.name, error)
            self.logged += 1
        for tracker in self.active:
            try:
                tracker.close()
            except (Exception, SystemExit) as error:
                self._fail(tracker.name, error)
