"""One logger held to errors for a while: a step whose own failure is said in one line keeps the per-attempt
warnings of the parts underneath it out of the output."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_logger(name: str, level: int = logging.ERROR) -> Iterator[None]:
    """Records of logger `name` below `level` are dropped inside the block; its own level comes back after."""
    log = logging.getLogger(name)
    before = log.level
    log.setLevel(level)
    try:
        yield
    finally:
        log.setLevel(before)
