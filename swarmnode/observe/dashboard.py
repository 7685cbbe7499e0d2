"""`swarmnode dashboard`: a live terminal view of a run's health, drawn from the `status --json` document.

`run_dashboard` is the loop: one client-mode DHT member (read-only, throwaway key), `read_status` every few seconds
(the same code path as `swarmnode status`), a rich Live view of `build_view` (`dashboard_view`), `q` on a terminal
quits (cbreak mode, restored on exit), Ctrl-C / SIGTERM quit cleanly too; while the view is up, log lines go into
it rather than over it (`logs_into`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.live import Live

from swarmnode.observe.card_view import CardStatus
from swarmnode.observe.dashboard_view import History, build_view
from swarmnode.observe.status import client_member
from swarmnode.protocol.run_card import RunCard
from swarmnode.swarm.p2p import SwarmStartError


class _ToHistory(logging.Handler):
    def __init__(self, history: History) -> None:
        super().__init__(logging.WARNING)
        self.history = history

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            when = time.strftime("%H:%M:%S", time.localtime(record.created))
            self.history.logs.append(f"{when} {record.levelname.lower()} {record.name}: {record.getMessage()}"[:200])


@contextlib.contextmanager
def logs_into(history: History) -> Iterator[None]:
    """While the live view is up, log lines that would go to the terminal (root, hivemind and any other logger
    with a stderr/stdout handler) go to `history` instead (warnings and worse), so they do not draw over it."""
    terminal = {sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__}
    known = list(logging.Logger.manager.loggerDict.values())  # placeholders (no handlers) are not loggers
    loggers = [logging.getLogger()] + [lg for lg in known if isinstance(lg, logging.Logger)]
    swapped: list[tuple[logging.Logger, list[logging.Handler]]] = []
    sink = _ToHistory(history)
    for logger in loggers:
        mine: list[logging.Handler] = [
            h
            for h in logger.handlers
            if isinstance(h, logging.StreamHandler)
            and not isinstance(h, logging.FileHandler)
            and getattr(h, "stream", None) in terminal
        ]
        if mine:
            for h in mine:
                logger.removeHandler(h)
            logger.addHandler(sink)
            swapped.append((logger, mine))
    try:
        yield
    finally:
        for logger, handlers in swapped:
            logger.removeHandler(sink)
            for h in handlers:
                logger.addHandler(h)


@contextlib.contextmanager
def key_reader(
    stop: asyncio.Event, loop: asyncio.AbstractEventLoop, on_page: Callable[[int], None] = lambda _step: None
) -> Iterator[bool]:
    """On a terminal: cbreak mode, `q` sets `stop`, `n` / `p` call `on_page(+1 / -1)`; the terminal's mode is
    restored on exit. Yields whether on."""
    stream = sys.stdin
    if stream is None or not stream.isatty():
        yield False
        return
    fd = stream.fileno()
    saved = termios.tcgetattr(fd)

    def on_key() -> None:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        if not data or b"q" in data.lower():
            stop.set()
            return
        for key in data.lower():
            if key in b"np":
                on_page(1 if key == ord("n") else -1)

    tty.setcbreak(fd)
    loop.add_reader(fd, on_key)
    try:
        yield True
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def run_dashboard(
    cfg,
    stop: asyncio.Event,
    *,
    refresh: float = 3.0,
    once: bool = False,
    console: Console | None = None,
    card: RunCard | None = None,
) -> dict[str, Any]:
    """Poll the run's health (and `card`: `CardStatus`) every `refresh` s and draw it until `stop` (q, Ctrl-C)."""
    console, status = console or Console(), CardStatus(card)
    poll_timeout = max(10.0, 3 * refresh)
    member = client_member(cfg)
    try:
        await asyncio.wait_for(member.start(), cfg.network.startup_timeout + 30)
    except TimeoutError:
        raise SwarmStartError(f"no answer from the swarm within {cfg.network.startup_timeout + 30:.0f} s") from None
    try:
        history = History()
        doc = await asyncio.wait_for(status.read(member), poll_timeout)
        history.add(doc)

        def rows() -> int:
            """Peer rows that fit beside the other panels (and the extra learners' table, log lines)."""
            extra = max(0, sum(p["role"] == "learner" for p in doc["peers"]) - 2)
            board = 11 if (doc.get("board") or {}).get("learners") else 0  # the contributors panel
            return max(5, console.height - 28 - board - (extra + 4 if extra else 0) - len(history.logs))

        if once:
            console.print(build_view(doc, history, max_rows=rows()))
            return doc
        loop = asyncio.get_running_loop()
        live: Live | None = None

        def turn_page(step: int) -> None:
            pages = max(1, -(-len(doc["peers"]) // rows()))
            history.page = min(pages - 1, max(0, history.page + step))
            if live is not None:
                live.update(build_view(doc, history, rows()), refresh=True)

        live = Live(
            build_view(doc, history, rows()),
            console=console,
            screen=console.is_terminal,
            auto_refresh=False,
            redirect_stderr=False,
        )
        with live, key_reader(stop, loop, turn_page), logs_into(history):
            while not stop.is_set():
                try:
                    await asyncio.wait_for(stop.wait(), refresh)
                    break
                except TimeoutError:
                    pass
                try:
                    fresh = await asyncio.wait_for(status.read(member), poll_timeout)
                    if not fresh["peers"] and not await member.dht.p2p.list_peers():
                        raise ConnectionError(
                            "lost contact with the swarm: connected to none of its peers (is the bootstrap down?)"
                        )
                    doc = fresh
                    history.add(doc)
                except Exception as exc:  # keep showing the last view; say the poll failed
                    history.error = str(exc) or type(exc).__name__
                live.update(build_view(doc, history, rows()), refresh=True)
        return doc
    finally:
        await member.stop()
