"""Length-prefixed frames on hivemind binary streams (8-byte big-endian length, then the payload).

Shared by rollout gossip and weight transfer. Lengths are checked against a caller's limit before the payload
is read, so an oversized message costs the receiver nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

from swarmnode.protocol.codec import InvalidRecord, unpack

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
