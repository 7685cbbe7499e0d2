"""The weight store's wire server: manifests, have-maps and chunks to any peer of the run (every holder serves).

Wire protocol (one hivemind binary stream per fetch worker, persistent): the client sends requests as frames
(8-byte big-endian length + msgpack), the server answers each with frames; an empty frame means "I do not have
it". Requests: {"op": "manifest", "version": v} (v = -1: newest), {"op": "chunks", "hashes": [...]},
{"op": "have", "version": v} (answer: the version's have-map, see `havemap`), {"op": "bye"}. The client closes
only after its last answer arrived and "bye" was sent (closing right after the last write truncated QUIC
streams).

Every stream holds a file descriptor here (hivemind hands each one over a unix socket) for as long as it is
open, so streams are slots, capped per peer and in total and shared fairly among strangers (`slots`). A stream
that moved no chunks for `idle_timeout` is closed: a manifest or a have-map every few seconds keeps no slot.
A chunk just sent to one fetcher is "not yet" to the others for a moment (`first_serve`), so concurrent fetchers
of a new version take it from each other rather than each from the publisher.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable

from hivemind.p2p import P2P

from swarmnode.protocol.codec import InvalidRecord, unpack
from swarmnode.swarm.frames import read_frame, write_frame
from swarmnode.swarm.weights.first_serve import FirstServes
from swarmnode.swarm.weights.slots import Slot, SlotTable, address_group
from swarmnode.swarm.weights.store import WeightStore

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 << 10
MAX_HASHES_PER_REQUEST = 64


def protocol_name(run_id: str) -> str:
    """The stream handler name weights are served under for one run."""
    return f"swarmnode/{run_id}/weights/1"


class WeightServer:
    """Serves one WeightStore's manifests and chunks on a P2P host, counting what it served to whom."""

    def __init__(
        self,
        store: WeightStore,
        *,
        idle_timeout: float = 20.0,
        max_streams_per_peer: int = 8,
        max_streams: int = 256,
        stranger_streams_per_peer: int = 4,
        stranger_share: float = 0.5,
        evict_after: float = 5.0,
        trusted: Callable[[str], bool] | None = None,
        first_serves: FirstServes | None = None,
    ):
        self.store = store
        self.first_serves = first_serves or FirstServes()  # a chunk just sent to one fetcher: "not yet" to others
        self.idle_timeout, self.evict_after = idle_timeout, evict_after
        self.max_streams_per_peer, self.max_streams = max_streams_per_peer, max_streams
        self.stranger_streams_per_peer = min(stranger_streams_per_peer, max_streams_per_peer)
        self.max_stranger_streams = max(1, int(stranger_share * max_streams))
        self.trusted: Callable[[str], bool] = trusted or (lambda peer: True)  # the role sets who is trusted
        self.slots = SlotTable(
            max_total=max_streams,
            max_per_peer=max_streams_per_peer,
            stranger_per_peer=stranger_streams_per_peer,
            max_strangers=self.max_stranger_streams,
            evict_after=evict_after,
        )
        self.streams_refused = 0
        self.served_chunks = 0
        self.served_bytes = 0
        self.served_chunks_by_peer: collections.Counter[str] = collections.Counter()
        self.requests_rejected = 0

    async def start(self, p2p: P2P) -> WeightServer:
        """Register the stream handler on `p2p`; returns self."""
        await p2p.add_binary_stream_handler(protocol_name(self.store.run_id), self._handle)
        return self

    @property
    def open_streams(self) -> collections.Counter[str]:
        """Peer -> streams it holds open now."""
        return self.slots.by_peer

    @property
    def stranger_streams(self) -> int:
        """Streams open now of peers not trusted (strangers)."""
        return self.slots.strangers

    @property
    def streams_evicted(self) -> int:
        """Streams closed to give their slot to another peer."""
        return self.slots.evicted

    async def _handle(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(info.peer_id)
        slot = self.slots.admit(peer, address_group(peer, str(info.addr)), bool(self.trusted(peer)), writer)
        if slot is None:
            self.streams_refused += 1
            if self.streams_refused in (1, 10, 100) or self.streams_refused % 1000 == 0:
                logger.warning(
                    "weights: refused %d streams over the caps (%d per peer, %d in all, strangers %d per "
                    "peer and %d in all); latest from %s",
                    self.streams_refused,
                    self.max_streams_per_peer,
                    self.max_streams,
                    self.stranger_streams_per_peer,
                    self.max_stranger_streams,
                    peer[-8:],
                )
            writer.close()
            return
        self.first_serves.opened(peer)
        try:
            while not slot.evicted:
                left = self.idle_timeout - (time.monotonic() - slot.useful_at)
                req = await asyncio.wait_for(read_frame(reader, MAX_REQUEST_BYTES), max(0.0, left))
                if req is None or not await self._answer(unpack(req, MAX_REQUEST_BYTES), writer, slot):
                    break
        except InvalidRecord as exc:
            self.requests_rejected += 1
            logger.warning("weights: rejected request from %s: %s", peer[-8:], exc)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()
            self.slots.release(slot)
            self.first_serves.closed(peer)

    async def _answer(self, req: dict, writer: asyncio.StreamWriter, slot: Slot) -> bool:
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
            await write_frame(writer, m.encode() if m else b"")  # moves no weights: the slot stays idle
            return True
        if op == "chunks":
            hashes = req.get("hashes")
            if not isinstance(hashes, list) or len(hashes) > MAX_HASHES_PER_REQUEST:
                raise InvalidRecord(f"chunk request needs a list of at most {MAX_HASHES_PER_REQUEST} hashes")
            for h in hashes:
                if not isinstance(h, bytes) or len(h) != 32:
                    raise InvalidRecord("chunk hash must be 32 bytes")
                if self.first_serves.defer(h.hex(), peer, slot.trusted):  # another fetcher just got it: "not yet"
                    await write_frame(writer, b"")
                    continue
                data = self.store.read_chunk(h.hex())
                await write_frame(writer, data if data is not None else b"")
                if data is not None:
                    self.first_serves.served(h.hex(), peer, slot.trusted)
                    slot.useful_at = time.monotonic()  # only chunks make a slot useful
                    self.served_chunks += 1
                    self.served_bytes += len(data)
                    self.served_chunks_by_peer[peer] += 1
            return True
        raise InvalidRecord(f"unknown op {op!r}")
