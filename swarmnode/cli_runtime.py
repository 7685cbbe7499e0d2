"""How a long-running command lives in its process: logging to stderr, and running until Ctrl-C or SIGTERM.

`run_until_signal(main)` runs `main(stop)` in a fresh event loop. The first SIGINT or SIGTERM sets `stop` so the
node leaves cleanly (withdraws its record, saves its checkpoint, stops p2pd). If that has not finished after
`STOP_GRACE_S`, the coroutine is cancelled; `HARD_EXIT_S` later the process exits regardless (a worker thread
in the middle of a model step cannot be interrupted; p2pd's watchdog stops the daemon). A second signal exits at
once. After SIGINT the command ends with `Interrupted` (exit code 130); after SIGTERM it ends normally (0).

Outside that loop (while the process imports and reads its config, before anything is started, and once the loop
has stopped everything) a SIGTERM ends the process at once with 0 (`exit_zero_on_sigterm`): `python -m swarmnode`
installs it before anything else is imported, so a node exits 0 on SIGTERM at any moment of its life.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from swarmnode.errors import ExitCode, Interrupted, SwarmnodeError

STOP_GRACE_S = 8.0  # a clean leave normally takes under 2 s
HARD_EXIT_S = 4.0  # after the cancellation, for threads that do not end
REPEAT_WINDOW_S = 60.0  # a repeated log line is shown once per this many seconds...
QUIET_LOGGERS = {"swarmnode.swarm.validator": 600.0}  # ...or this many: another run's records arrive every beat
logger = logging.getLogger(__name__)


class NoAnswerError(SwarmnodeError):
    """A client command got no answer from the swarm in time."""

    exit_code = ExitCode.NETWORK


def _hard_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _exit_zero(signum: int, frame: Any) -> None:
    _hard_exit(0)


def exit_zero_on_sigterm() -> None:
    """SIGTERM ends the process at once with exit code 0 (nothing of the node runs yet, or no longer)."""
    signal.signal(signal.SIGTERM, _exit_zero)


def _exit_code_for(sig: int) -> int:
    return int(ExitCode.INTERRUPTED) if sig == signal.SIGINT else 0


def run_until_signal(main: Callable[[asyncio.Event], Awaitable[Any]], timeout: float | None = None) -> Any:
    """Run `main(stop)` until it returns; SIGINT/SIGTERM set `stop` (see the module docstring).

    `timeout`: `NoAnswerError` if `main` has not returned after this many seconds (for one-shot client commands).
    """
    received: list[int] = []

    async def runner() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        work = asyncio.ensure_future(main(stop))

        def on_signal(sig: int) -> None:
            if received:  # a second Ctrl-C: the user does not want to wait
                _hard_exit(_exit_code_for(received[0]))
            received.append(sig)
            stop.set()
            from swarmnode.swarm.p2p import STOP_REQUESTED

            STOP_REQUESTED.set()  # a p2pd the signal reached while starting is not retried as a failure
            loop.call_later(STOP_GRACE_S, work.cancel)
            timer = threading.Timer(STOP_GRACE_S + HARD_EXIT_S, _hard_exit, args=(_exit_code_for(sig),))
            timer.daemon = True
            timer.start()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)
        loop.set_exception_handler(_quiet_lost_connections)
        try:
            return await asyncio.wait_for(work, timeout)
        except TimeoutError:
            raise NoAnswerError(f"no answer from the swarm within {timeout:.0f} s") from None
        except (asyncio.CancelledError, Interrupted):  # stopped by the signal (p2pd it reached while starting, too)
            if received:
                return None
            raise

    try:
        result = asyncio.run(runner())
    finally:
        exit_zero_on_sigterm()  # the loop's handlers are gone with it: a SIGTERM from now on still exits 0
    if received and received[0] == signal.SIGINT:
        raise Interrupted("interrupted")
    return result


def _quiet_lost_connections(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A background task that lost its connection (a client hung up, p2pd stopped first on Ctrl-C or a SIGTERM
    to the process group) is one debug line, not an asyncio traceback; anything else gets the default report."""
    exc = context.get("exception")
    if isinstance(exc, (ConnectionError, asyncio.IncompleteReadError, EOFError)):
        logger.debug("%s: %s", context.get("message", "background task"), exc)
        return
    loop.default_exception_handler(context)


class RepeatFilter(logging.Filter):
    """Lets a given log message through once per `window` seconds; repeats are counted and dropped.

    A node that keeps meeting the same thing (another run's DHT records, an unreachable peer) says so once, not
    every few seconds; the next time it passes, the line says how many repeats were hidden.
    """

    def __init__(self, window: float = REPEAT_WINDOW_S, windows: dict[str, float] | None = None):
        super().__init__()
        self.window = window
        self.windows = dict(QUIET_LOGGERS if windows is None else windows)  # per logger name
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.getMessage())
        now = time.monotonic()
        window = self.windows.get(record.name, self.window)
        last, hidden = self._seen.get(key, (-float("inf"), 0))
        if now - last < window:
            self._seen[key] = (last, hidden + 1)
            return False
        if len(self._seen) > 1000:  # bounded: forget everything rather than grow
            self._seen.clear()
        self._seen[key] = (now, 0)
        if hidden:
            record.msg = f"{record.getMessage()} (and {hidden} times more since it was last shown)"
            record.args = ()
        return True


VERBOSE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class PlainFormatter(logging.Formatter):
    """A log line as the node's printed lines read: the message alone, `warning: ` before a warning, `error
    (<logger>): ` before an error (the command's own last `error: ` line stays the only one so written)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno < logging.WARNING:
            return text
        if record.levelno == logging.WARNING:
            return f"warning: {text}"
        return f"{record.levelname.lower()} ({record.name}): {text}"


def setup_logging(verbose: bool = False) -> None:
    """Our logs to stderr (a repeated line shown once a minute, another run's refused records once per 10 min);
    hivemind's per-RPC chatter kept out of the way."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr)
    for handler in logging.getLogger().handlers:  # lines read as the node's own printed ones (verbose: full)
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr:
            handler.setFormatter(logging.Formatter(VERBOSE_FORMAT) if verbose else PlainFormatter())
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RepeatFilter) for f in handler.filters):
            handler.addFilter(RepeatFilter())
    logging.getLogger("swarmnode").setLevel(logging.INFO)
    logging.getLogger("hivemind").setLevel(logging.DEBUG if verbose else logging.CRITICAL)
