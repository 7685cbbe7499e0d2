"""The weight store's wire server: manifests, have-maps and chunks to any peer of the run (every holder serves).

Wire protocol (one hivemind binary stream per fetch worker, persistent): the client sends requests as frames
(8-byte big-endian length + msgpack), the server answers each with frames; an empty frame means "I do not have
it". Requests: {"op": "manifest", "version": v} (v = -1: newest), {"op": "chunks", "hashes": [...]},
{"op": "have", "version": v} (answer: the version's have-map, see `havemap`), {"op": "bye"}. The client closes
only after its last answer arrived and "bye" was sent (closing right after the last write truncated QUIC
streams).

Every stream holds a file descriptor here (hivemind hands each one over a unix socket) for as long as it is
open, so streams are capped per peer and in total (beyond either, a new stream is closed at once, before any
byte is read), and a stream idle for `idle_timeout` is closed.
"""

from __future__ import annotations

import asyncio
import collections
import logging

from hivemind.p2p import P2P

from swarmnode.protocol.codec import InvalidRecord, unpack
from swarmnode.swarm.frames import read_frame, write_frame
from swarmnode.swarm.weights.store import WeightStore

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 << 10
MAX_HASHES_PER_REQUEST = 64


def protocol_name(run_id: str) -> str:
    """The stream handler name weights are served under for one run."""
    return f"swarmnode/{run_id}/weights/1"


class WeightServer:
    """Serves one WeightStore's manifests and chunks on a P2P host, counting what it served to whom."""

    def __init__(self, store: WeightStore, *, idle_timeout: float = 20.0, max_streams_per_peer: int = 8,
                 max_streams: int = 256):
        self.store = store
        self.idle_timeout = idle_timeout
        self.max_streams_per_peer = max_streams_per_peer
        self.max_streams = max_streams
        self.open_streams: collections.Counter[str] = collections.Counter()  # peer -> streams open now
        self.streams_refused = 0
        self.served_chunks = 0
        self.served_bytes = 0
        self.served_chunks_by_peer: collections.Counter[str] = collections.Counter()
        self.requests_rejected = 0

    async def start(self, p2p: P2P) -> "WeightServer":
        """Register the stream handler on `p2p`; returns self."""
        await p2p.add_binary_stream_handler(protocol_name(self.store.run_id), self._handle)
        return self

    async def _handle(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(info.peer_id)
        if (self.open_streams[peer] >= self.max_streams_per_peer
                or sum(self.open_streams.values()) >= self.max_streams):
            self.streams_refused += 1
            if self.streams_refused in (1, 10, 100) or self.streams_refused % 1000 == 0:
                logger.warning("weights: refused %d streams over the caps (%d per peer, %d in all); latest from %s",
                               self.streams_refused, self.max_streams_per_peer, self.max_streams, peer[-8:])
            writer.close()
            return
        self.open_streams[peer] += 1
        try:
            while True:
                req = await asyncio.wait_for(read_frame(reader, MAX_REQUEST_BYTES), self.idle_timeout)
                if req is None or not await self._answer(unpack(req, MAX_REQUEST_BYTES), writer, peer):
                    break
        except InvalidRecord as exc:
            self.requests_rejected += 1
            logger.warning("weights: rejected request from %s: %s", peer[-8:], exc)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            writer.close()
            self.open_streams[peer] -= 1
            if not self.open_streams[peer]:
                del self.open_streams[peer]

    async def _answer(self, req: dict, writer: asyncio.StreamWriter, peer: str) -> bool:
        """Answer one request; False ends the stream."""
        op = req.get("op")
        if op == "bye":
            return False
        if op in ("manifest", "have"):
            version = req.get("version")
            if not isinstance(version, int) or isinstance(version, bool):
                raise InvalidRecord(f"{op} request needs an int version")
            if op == "have":
                await write_frame(writer, self.store.have_map(version) if version >= 0 else b"")
                return True
            v = self.store.latest() if version < 0 else version
            m = self.store.manifest(v) if v is not None else None
            await write_frame(writer, m.encode() if m else b"")
            return True
        if op == "chunks":
            hashes = req.get("hashes")
            if not isinstance(hashes, list) or len(hashes) > MAX_HASHES_PER_REQUEST:
                raise InvalidRecord(f"chunk request needs a list of at most {MAX_HASHES_PER_REQUEST} hashes")
            for h in hashes:
                if not isinstance(h, bytes) or len(h) != 32:
                    raise InvalidRecord("chunk hash must be 32 bytes")
                data = self.store.read_chunk(h.hex())
                await write_frame(writer, data if data is not None else b"")
                if data is not None:
                    self.served_chunks += 1
                    self.served_bytes += len(data)
                    self.served_chunks_by_peer[peer] += 1
            return True
        raise InvalidRecord(f"unknown op {op!r}")
