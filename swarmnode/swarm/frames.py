"""Length-prefixed frames on hivemind binary streams (8-byte big-endian length, then the payload).

Shared by rollout gossip and weight transfer. Lengths are checked against a caller's limit before the payload
is read, so an oversized message costs the receiver nothing.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

from swarmnode.protocol.codec import InvalidRecord, unpack
from swarmnode.swarm.hivemind_compat import has_buffered_bytes

HEADER = 8
MAX_CONTROL_BYTES = 64 << 10
_SMALL = 1 << 16


async def write_frame(writer: asyncio.StreamWriter, data: bytes | bytearray | memoryview) -> None:
    """Write one frame and wait for the transport to take it."""
    header = len(data).to_bytes(HEADER, "big")
    if len(data) < _SMALL:
        writer.write(header + bytes(data))
    else:
        writer.write(header)
        writer.write(data)
    await writer.drain()


async def write_frames(writer: asyncio.StreamWriter, frames: list[bytes]) -> None:
    """Write several frames (small ones joined into one write) and wait for the transport to take them."""
    if all(len(f) < _SMALL for f in frames):
        writer.write(b"".join(len(f).to_bytes(HEADER, "big") + bytes(f) for f in frames))
    else:
        for f in frames:
            writer.write(len(f).to_bytes(HEADER, "big"))
            writer.write(f)
    await writer.drain()


async def read_header(reader: asyncio.StreamReader) -> int | None:
    """The next frame's announced length, or None on a clean end of stream."""
    try:
        return int.from_bytes(await reader.readexactly(HEADER), "big")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> bytes | None:
    """One frame, or None at a clean end of stream; InvalidRecord if it announces more than `max_bytes`."""
    n = await read_header(reader)
    if n is None:
        return None
    if n > max_bytes:
        raise InvalidRecord(f"frame of {n} bytes exceeds the limit of {max_bytes}")
    return await reader.readexactly(n)


async def read_control(reader: asyncio.StreamReader, max_bytes: int = MAX_CONTROL_BYTES) -> dict[str, Any] | None:
    """A small msgpack control frame (request, ack), or None at end of stream."""
    data = await read_frame(reader, max_bytes)
    return None if data is None else unpack(data, max_bytes)


class FrameSink(asyncio.BufferedProtocol):
    """Receives frames straight into caller-provided buffers (no intermediate copies), in request order.

    Takes over a stream's transport (`attach`): the socket is read with `recv_into` into the buffer the caller
    registered with `expect`, so a 4 MiB chunk lands in its final place with one kernel copy instead of the four
    copies a StreamReader + `readexactly` + slice assignment make. Requests go out through `send`.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._expected: collections.deque[tuple[memoryview, asyncio.Future[int]]] = collections.deque()
        self._header = bytearray(HEADER)
        self._header_view = memoryview(self._header)
        self._got = 0  # bytes of the current header or payload received
        self._payload: memoryview | None = None  # the current frame's destination, once its header is in
        self._scratch = memoryview(bytearray(_SMALL))
        self._error: BaseException | None = None
        self.last_received = time.monotonic()  # when the last byte arrived (or the sink was made)

    @classmethod
    def attach(cls, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> FrameSink:
        """Take over a freshly opened stream; its reader must hold no unread bytes."""
        if has_buffered_bytes(reader):
            raise RuntimeError("stream already has buffered bytes; cannot take over its transport")
        sink = cls()
        transport = writer.transport
        assert isinstance(transport, asyncio.Transport)  # a stream's transport reads and writes
        transport.set_protocol(sink)
        sink.transport = transport
        return sink

    def send(self, data: bytes) -> None:
        """Write one frame (small requests: no flow control needed)."""
        if self._error is not None:
            raise self._error
        if self.transport is None:
            raise ConnectionError("the frame sink is not attached to a stream")
        self.transport.write(len(data).to_bytes(HEADER, "big") + data)

    def expect(self, dest: memoryview) -> asyncio.Future[int]:
        """The next unclaimed answer frame lands in `dest`; the future gives its length (0: an empty frame).

        A frame longer than `dest` fails the future with InvalidRecord; end of stream mid-frame with
        IncompleteReadError. Raises at once if the stream already failed."""
        if self._error is not None:
            raise self._error
        fut = asyncio.get_running_loop().create_future()
        self._expected.append((dest, fut))
        return fut

    def close(self) -> None:
        """Stop receiving at once (no byte lands in a registered buffer after this) and close the stream."""
        self._fail(ConnectionAbortedError("stream closed by this side"), notify=False)
        if self.transport is not None:
            self.transport.close()

    # -- asyncio.BufferedProtocol -------------------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        if self._error is not None:
            return self._scratch  # closing: whatever still arrives is dropped
        if self._payload is None:
            return self._header_view[self._got :]
        return self._payload[self._got :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._error is not None:
            return
        self.last_received = time.monotonic()
        self._got += nbytes
        if self._payload is None:
            if self._got < HEADER:
                return
            n = int.from_bytes(self._header, "big")
            if not self._expected:
                return self._fail(InvalidRecord("frame arrived that nothing was requested for"))
            dest, _ = self._expected[0]
            if n > len(dest):
                return self._fail(InvalidRecord(f"frame of {n} bytes exceeds the limit of {len(dest)}"))
            self._payload, self._got = dest[:n], 0
        if self._got == len(self._payload):
            _, fut = self._expected.popleft()
            if not fut.done():
                fut.set_result(len(self._payload))
            self._payload, self._got = None, 0

    def eof_received(self) -> bool:
        if self._payload is not None:
            self._fail(asyncio.IncompleteReadError(bytes(self._payload[: self._got]), len(self._payload)))
        elif self._got or self._expected:
            self._fail(asyncio.IncompleteReadError(bytes(self._header[: self._got]), HEADER))
        else:
            self._fail(ConnectionResetError("stream ended"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("stream closed"))

    def _fail(self, exc: BaseException, notify: bool = True) -> None:
        """The oldest waiter gets the error (with `notify`); the others are cancelled."""
        if self._error is None:
            self._error = exc
        first = notify
        while self._expected:
            _, fut = self._expected.popleft()
            if not fut.done():
                fut.set_exception(self._error) if first else fut.cancel()
            first = False
        self._payload = None
