"""The weight store's wire server: manifests, have-maps and chunks to any peer of the run (every holder serves).

Wire protocol (one hivemind binary stream per fetch worker, persistent): the client sends requests as frames
(8-byte big-endian length + msgpack), the server answers each with frames; an empty frame means "I do not have
it". Requests: {"op": "manifest", "version": v} (v = -1: newest), {"op": "chunks", "hashes": [...]},
{"op": "have", "version": v} (answer: the version's have-map, see `havemap`), {"op": "bye"}. The client closes
only after its last answer arrived and "bye" was sent (closing right after the last write truncated QUIC
streams).

Every stream holds a file descriptor here (hivemind hands each one over a unix socket) for as long as it is
open, so streams are slots, capped per peer and in total, that strangers cannot hold:
- a `trusted` peer (the run's designated learners, and for a learner the samplers whose work passed its spot
  checks) may hold `max_streams_per_peer`; any other peer (a stranger) `stranger_streams_per_peer`, and all
  strangers together at most `stranger_share` of `max_streams`;
- a stream is useful while it is served a manifest or chunks: one that got nothing but have-maps for
  `idle_timeout` is closed (a valid `have` every few seconds keeps no slot);
- a new stream over a cap takes the slot of a stranger's stream that has not been useful for `evict_after`
  seconds (a trusted peer's takes the least recently useful stranger's at once), else it is closed before any
  byte is read.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

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


@dataclass(eq=False)
class _Slot:
    """One open stream."""

    peer: str
    trusted: bool
    writer: asyncio.StreamWriter
    useful_at: float = field(default_factory=time.monotonic)  # last time it was served a manifest or chunks
    evicted: bool = False


class WeightServer:
    """Serves one WeightStore's manifests and chunks on a P2P host, counting what it served to whom."""

    def __init__(self, store: WeightStore, *, idle_timeout: float = 20.0, max_streams_per_peer: int = 8,
                 max_streams: int = 256, stranger_streams_per_peer: int = 4, stranger_share: float = 0.5,
                 evict_after: float = 5.0, trusted: Callable[[str], bool] | None = None):
        self.store = store
        self.idle_timeout, self.evict_after = idle_timeout, evict_after
        self.max_streams_per_peer, self.max_streams = max_streams_per_peer, max_streams
        self.stranger_streams_per_peer = min(stranger_streams_per_peer, max_streams_per_peer)
        self.max_stranger_streams = max(1, int(stranger_share * max_streams))
        self.trusted: Callable[[str], bool] = trusted or (lambda peer: True)  # the role sets who is trusted
        self.open_streams: collections.Counter[str] = collections.Counter()  # peer -> streams open now
        self._slots: set[_Slot] = set()
        self.streams_refused = 0
        self.streams_evicted = 0
        self.served_chunks = 0
        self.served_bytes = 0
        self.served_chunks_by_peer: collections.Counter[str] = collections.Counter()
        self.requests_rejected = 0

    async def start(self, p2p: P2P) -> "WeightServer":
        """Register the stream handler on `p2p`; returns self."""
        await p2p.add_binary_stream_handler(protocol_name(self.store.run_id), self._handle)
        return self

    @property
    def stranger_streams(self) -> int:
        """Streams open now of peers not trusted (strangers)."""
        return sum(1 for s in self._slots if not s.trusted)

    def _admit(self, peer: str, writer: asyncio.StreamWriter) -> _Slot | None:
        """A slot for a new stream of `peer` (evicting a stranger's idle stream if that is what it takes), or None."""
        trusted = bool(self.trusted(peer))
        if self.open_streams[peer] >= (self.max_streams_per_peer if trusted else self.stranger_streams_per_peer):
            return None
        strangers = [s for s in self._slots if not s.trusted]
        full = len(self._slots) >= self.max_streams or (not trusted and len(strangers) >= self.max_stranger_streams)
        if full:
            now = time.monotonic()
            idle = [s for s in strangers if trusted or now - s.useful_at >= self.evict_after]
            if not idle:
                return None
            self._evict(min(idle, key=lambda s: s.useful_at))
        slot = _Slot(peer, trusted, writer)
        self._slots.add(slot)
        self.open_streams[peer] += 1
        return slot

    def _evict(self, slot: _Slot) -> None:
        slot.evicted = True
        self.streams_evicted += 1
        self._release(slot)
        slot.writer.close()

    def _release(self, slot: _Slot) -> None:
        if slot in self._slots:
            self._slots.discard(slot)
            self.open_streams[slot.peer] -= 1
            if not self.open_streams[slot.peer]:
                del self.open_streams[slot.peer]

    async def _handle(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(info.peer_id)
        slot = self._admit(peer, writer)
        if slot is None:
            self.streams_refused += 1
            if self.streams_refused in (1, 10, 100) or self.streams_refused % 1000 == 0:
                logger.warning("weights: refused %d streams over the caps (%d per peer, %d in all, strangers %d per "
                               "peer and %d in all); latest from %s", self.streams_refused, self.max_streams_per_peer,
                               self.max_streams, self.stranger_streams_per_peer, self.max_stranger_streams, peer[-8:])
            writer.close()
            return
        try:
            while not slot.evicted:
                left = self.idle_timeout - (time.monotonic() - slot.useful_at)
                req = await asyncio.wait_for(read_frame(reader, MAX_REQUEST_BYTES), max(0.0, left))
                if req is None or not await self._answer(unpack(req, MAX_REQUEST_BYTES), writer, slot):
                    break
        except InvalidRecord as exc:
            self.requests_rejected += 1
            logger.warning("weights: rejected request from %s: %s", peer[-8:], exc)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            writer.close()
            self._release(slot)

    async def _answer(self, req: dict, writer: asyncio.StreamWriter, slot: _Slot) -> bool:
        """Answer one request; False ends the stream."""
        peer = slot.peer
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
            if m:
                slot.useful_at = time.monotonic()
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
                    slot.useful_at = time.monotonic()
                    self.served_chunks += 1
                    self.served_bytes += len(data)
                    self.served_chunks_by_peer[peer] += 1
            return True
        raise InvalidRecord(f"unknown op {op!r}")
