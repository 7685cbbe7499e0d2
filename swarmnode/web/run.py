"""`swarmnode dashboard --web ADDR:PORT`: the run page, read the way the terminal dashboard reads.

One client-mode DHT member with a throwaway key polls the status document every `refresh` seconds (the same
reads as `status` and the terminal dashboard: `observe.card_view.CardStatus`), renders the page once per poll
(`web.page`) and hands it, with the document, to the server (`web.server`), which serves them from memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from swarmnode.errors import UsageError
from swarmnode.observe.card_view import CardStatus
from swarmnode.observe.status import client_member
from swarmnode.observe.status_schema import STATUS_SCHEMA
from swarmnode.protocol.run_card import RunCard
from swarmnode.swarm.p2p import SwarmStartError
from swarmnode.web.page import render
from swarmnode.web.server import PageServer

logger = logging.getLogger(__name__)


def parse_address(text: str) -> tuple[str, int]:
    """`ADDR:PORT` (`127.0.0.1:8080`, `[::1]:8080`, `:8080` for every interface) -> (host, port); UsageError."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--web {text!r}: give ADDR:PORT, e.g. 127.0.0.1:8080 (port 0: any free port)")
    return host.strip("[]") or "0.0.0.0", int(port)


async def run_web(
    cfg,
    stop: asyncio.Event,
    address: tuple[str, int],
    *,
    refresh: float = 3.0,
    card: RunCard | None = None,
    emit: Callable[[str], None] = print,
) -> None:
    """Serve the run page at `address` until `stop` (Ctrl-C, SIGTERM)."""
    server = PageServer(STATUS_SCHEMA)
    try:
        host, port = await server.start(*address)
    except OSError as exc:
        raise UsageError(f"--web {address[0]}:{address[1]}: cannot listen there ({exc.strerror or exc})") from None
    status, member = CardStatus(card), client_member(cfg)
    try:
        try:
            await asyncio.wait_for(member.start(), cfg.network.startup_timeout + 30)
        except TimeoutError:
            raise SwarmStartError(f"no answer from the swarm within {cfg.network.startup_timeout + 30:.0f} s") from None
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        emit(f"run page: http://{shown}:{port}/ (JSON: /status.json, its schema: /schema.json)")
        while not stop.is_set():
            try:
                doc = await asyncio.wait_for(status.read(member), max(10.0, 3 * refresh))
                server.set_status(render(doc, refresh), doc)
            except Exception as exc:  # keep serving the last page; say the read failed
                logger.warning("reading the swarm failed: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), refresh)
            except TimeoutError:
                pass
    finally:
        await server.close()
        await member.stop()
