"""A small read-only HTTP/1.1 server on the caller's asyncio loop: the run page, its JSON and its schema.

GET and HEAD only (anything else: 405), three paths (`/`, `/status.json`, `/schema.json`; anything else: 404),
no login, no cookies, nothing that writes. The bodies are rendered once per poll by the caller (`set_status`)
and served from memory, so a request costs a parse and a write. Bounds: a token bucket per client address
(`rate` requests per second, `burst` saved up; over it: 429 with a one-line body, counted), at most
`max_clients` buckets remembered (the least recently seen forgotten), at most `max_connections` open at once
(more are closed at once, counted), request heads of at most `MAX_HEAD_BYTES`, and a connection idle for
`idle_timeout` seconds is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter, OrderedDict
from typing import Any

from swarmnode.swarm.rollout_push.peer_guard import TokenBucket

MAX_HEAD_BYTES = 8192
SECURITY_HEADERS = (
    "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\nCache-Control: no-store\r\n"
)
REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 429: "Too Many Requests", 400: "Bad Request"}


class PageServer:
    """See the module docstring. `await start(host, port)`, `set_status(...)` after each poll, `await close()`."""

    def __init__(
        self,
        schema: dict[str, Any],
        *,
        rate: float = 20.0,
        burst: float = 40.0,
        max_clients: int = 1024,
        max_connections: int = 64,
        idle_timeout: float = 15.0,
    ) -> None:
        self.rate, self.burst, self.max_clients = rate, burst, max_clients
        self.max_connections, self.idle_timeout = max_connections, idle_timeout
        self.bodies: dict[str, tuple[str, bytes]] = {
            "/": ("text/html; charset=utf-8", b"<!doctype html><p>reading the swarm...</p>"),
            "/status.json": ("application/json", b"null"),
            "/schema.json": ("application/json", json.dumps(schema, indent=1).encode()),
        }
        self.counts: Counter[str] = Counter()  # responses by status code, and refused connections
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._open = 0
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None

    def set_status(self, page: str, doc: dict[str, Any] | None) -> None:
        """The page and the JSON document served from now on."""
        self.bodies["/"] = ("text/html; charset=utf-8", page.encode())
        self.bodies["/status.json"] = ("application/json", json.dumps(doc, sort_keys=True).encode())

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, host, port, limit=MAX_HEAD_BYTES)
        sock = self._server.sockets[0].getsockname()
        self.address = (str(sock[0]), int(sock[1]))
        return self.address

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)

    def _allowed(self, client: str) -> bool:
        bucket = self._buckets.get(client)
        if bucket is None:
            bucket = self._buckets[client] = TokenBucket(self.rate, self.burst)
            if len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(client)
        return bucket.take()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= self.max_connections:
            self.counts["refused_connections"] += 1
            writer.close()
            return
        self._open += 1
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_timeout)
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                    return
                keep = await self._answer(head, client, writer)
                if not keep:
                    return
        finally:
            self._open -= 1
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, head: bytes, client: str, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; whether the connection stays open."""
        request, _, rest = head.partition(b"\r\n")
        parts = request.decode("latin-1").split(" ")
        close = b"connection: close" in rest.lower()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._send(writer, 400, "text/plain", b"bad request\n", close=True)
            return False
        method, target, _ = parts
        if not self._allowed(client):
            await self._send(writer, 429, "text/plain", b"too many requests\n", close=close, retry=True)
            return not close
        path = target.split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            await self._send(writer, 405, "text/plain", b"read-only: GET and HEAD only\n", close=close)
        elif path not in self.bodies:
            await self._send(writer, 404, "text/plain", b"not found\n", close=close)
        else:
            kind, body = self.bodies[path]
            await self._send(writer, 200, kind, body, close=close, head_only=method == "HEAD")
        return not close

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        code: int,
        kind: str,
        body: bytes,
        *,
        close: bool,
        retry: bool = False,
        head_only: bool = False,
    ) -> None:
        self.counts[str(code)] += 1
        head = (
            f"HTTP/1.1 {code} {REASONS[code]}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
            f"{SECURITY_HEADERS}{'Retry-After: 1' + chr(13) + chr(10) if retry else ''}"
            f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n"
        )
        writer.write(head.encode() + (b"" if head_only else body))
        with contextlib.suppress(ConnectionError):
            await writer.drain()
