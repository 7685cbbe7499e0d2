"""Publishing versions off the training thread: the learner hands each new version to a worker thread and goes
on training while it is written, signed and announced.

A publish costs disk writes and fsyncs (the version record, the chunk, the manifest) that the training thread
would otherwise wait for at every step. The worker publishes the newest version handed in; a version superseded before
the worker got to it is skipped (never announced, counted in `skipped`): samplers only ever want the newest, and
a version number is only recorded (`write_published`) when it is really announced. `flush` waits until what was
handed in is published.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from swarmnode.diskspace import is_disk_full

logger = logging.getLogger(__name__)


class LatestPublisher:
    """Runs `publish(version, *payload)` in one daemon thread for the newest version submitted (see the module
    docstring). `submit` never blocks on a publish in progress."""

    def __init__(self, publish: Callable[..., None], name: str = "publish") -> None:
        self._publish = publish
        self._cond = threading.Condition()
        self._pending: tuple[int, tuple[Any, ...]] | None = None
        self._busy = False
        self._closed = False
        self.published = 0  # versions published
        self.skipped = 0  # versions superseded before they were published
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, version: int, *payload: Any) -> None:
        """Publish `version` (with `payload`: its state, or adapters and their spec) soon; an older version still
        waiting is dropped in its favour."""
        with self._cond:
            if self._closed:
                raise RuntimeError("publisher closed")
            if self._pending is not None:
                self.skipped += 1
            self._pending = (version, payload)
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted is published (True), or `timeout` seconds pass (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Publish what is waiting (within `timeout`), then stop the thread."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._pending is None:
                    return
                (version, payload), self._pending = self._pending, None
                self._busy = True
            try:
                self._publish(version, *payload)
                self.published += 1
            except Exception as exc:  # a failed publish must not end publishing: the next version is tried
                self.failures += 1
                if not is_disk_full(exc):  # a full disk was said once, in one line, by the store's SpaceWatch
                    logger.exception("publishing version %d failed", version)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
