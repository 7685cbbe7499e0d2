"""Versioned weights between peers: a content-addressed local store that serves chunks, and a fetcher that
pulls a version from every holder at once.

Layout: a state dict becomes one flat buffer (tensors back to back, 64-byte aligned, raw bytes as in
safetensors) cut into fixed-size chunks named by their sha256 (4 MiB; bigger, the same every version, for a
state that would exceed the manifest's chunk limit). A manifest (protocol/manifest.py) signed by the
learner lists tensors and chunks. On disk, under the store's root:

    chunks/<sha256 hex>          verified chunk bytes (shared by every version that contains them)
    manifests/<version>.bin      complete versions (all chunks present)
    partial/<version>.bin        versions being fetched (their chunks are kept by GC; a restart resumes)

Wire protocol (one hivemind binary stream per worker, persistent): the client sends requests as frames
(8-byte big-endian length + msgpack), the server answers each with frames; an empty frame means "I do not
have it". Requests: {"op": "manifest", "version": v} (v = -1: newest), {"op": "chunks", "hashes": [...]},
{"op": "have", "version": v} (answer: two bitmaps of the version's chunks, held then being fetched, bit i =
byte i // 8, bit i % 8; empty if none), {"op": "bye"}. Fetchers poll holders' bitmaps and ask each holder only
for chunks it has, rarest first (counting chunks on their way to a holder), so concurrent fetchers spread the
publisher's chunks instead of each pulling the same ones, and then serve each other. The client closes only
after its last answer arrived and "bye" was sent (closing right after the last write truncated QUIC streams,
see DESIGN.md).

Per byte, a fetch costs what a raw stream costs plus one sha256: answers are read with `recv_into` straight
into the version's page-aligned buffer (frames.FrameSink), hashed in a worker thread, and written to disk with
O_DIRECT from that buffer in the background (no page-cache copy).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import hashlib
import heapq
import logging
import math
import mmap
import os
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch
from hivemind.p2p import P2P, PeerID

from swarmnode.identity import Identity
from swarmnode.protocol.codec import InvalidRecord, pack, unpack
from swarmnode.protocol.manifest import MAX_CHUNKS, MAX_MANIFEST_BYTES, ChunkEntry, TensorEntry, WeightManifest
from swarmnode.swarm.frames import FrameSink, read_frame, write_frame

logger = logging.getLogger(__name__)

CHUNK_BYTES = 4 << 20
ALIGN = 64
_BLOCK = 4096  # O_DIRECT alignment (address and length)
MAX_REQUEST_BYTES = 64 << 10
MAX_HASHES_PER_REQUEST = 64
_DTYPES = {
    torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float64: "float64",
    torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
    torch.bool: "bool",
}
_TORCH = {v: k for k, v in _DTYPES.items()}

ProgressCallback = Callable[[int, int], None]  # (bytes done, bytes total)
Buffer = bytearray | mmap.mmap  # a version's flat buffer (writable, fixed size)


class FetchError(RuntimeError):
    """A version could not be fetched from any holder; the message says why."""


def protocol_name(run_id: str) -> str:
    """The stream handler name weights are served under for one run."""
    return f"swarmnode/{run_id}/weights/1"


# ---------------------------------------------------------------------------------------------------- layout
def plan_layout(state: dict[str, torch.Tensor]) -> tuple[list[TensorEntry], int]:
    """Tensor index of the flat buffer (64-byte aligned offsets) and its total size."""
    entries, pos = [], 0
    for name, t in state.items():
        if t.dtype not in _DTYPES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} cannot be published")
        pos = -(-pos // ALIGN) * ALIGN
        nbytes = t.numel() * t.element_size()
        entries.append(TensorEntry(name, _DTYPES[t.dtype], tuple(t.shape), pos, nbytes))
        pos += nbytes
    return entries, pos


def flatten_into(state: dict[str, torch.Tensor], tensors: list[TensorEntry], buf: Buffer) -> None:
    """Copy every tensor's raw bytes into its place in `buf` (one copy, no intermediate)."""
    flat = torch.frombuffer(buf, dtype=torch.uint8) if len(buf) else torch.empty(0, dtype=torch.uint8)
    for entry in tensors:
        if entry.nbytes:
            src = state[entry.name].detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
            flat[entry.offset : entry.offset + entry.nbytes].copy_(src)


def tensors_from_buffer(manifest: WeightManifest, buf: Buffer) -> dict[str, torch.Tensor]:
    """Tensors viewing `buf` (zero copy); the caller copies them into its model."""
    out = {}
    for e in manifest.tensors:
        dtype = _TORCH[e.dtype]
        if e.nbytes == 0:
            out[e.name] = torch.empty(e.shape, dtype=dtype)
        else:
            count = e.nbytes // torch.empty(0, dtype=dtype).element_size()
            out[e.name] = torch.frombuffer(buf, dtype=dtype, count=count, offset=e.offset).reshape(e.shape)
    return out


def cut_chunks(buf: Buffer, chunk_bytes: int) -> list[ChunkEntry]:
    """Fixed-size chunks of `buf` with their sha256."""
    view = memoryview(buf)
    return [ChunkEntry(hashlib.sha256(view[i : i + chunk_bytes]).digest(), len(view[i : i + chunk_bytes]))
            for i in range(0, len(buf), chunk_bytes)]


def aligned_buffer(n: int) -> Buffer:
    """A zeroed, page-aligned, writable buffer of `n` bytes (an anonymous mapping): chunks in it can go to disk
    with O_DIRECT, straight from the buffer."""
    return mmap.mmap(-1, n) if n else bytearray()


def _direct_write(path: Path, view: memoryview) -> bool:
    """Write `view` to a new file with O_DIRECT (the disk reads the buffer; no copy into the page cache) when
    buffer and length are block-aligned and the filesystem allows it; False means: write it the usual way."""
    if not hasattr(os, "O_DIRECT") or len(view) % _BLOCK or view.readonly:
        return False
    if ctypes.addressof(ctypes.c_char.from_buffer(view)) % _BLOCK:
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    except OSError:  # e.g. tmpfs
        return False
    try:
        pos = 0
        while pos < len(view):
            pos += os.write(fd, view[pos:])
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _bitmap(indices: Iterable[int], n: int) -> bytes:
    """Bit i set for each index (bit i = byte i // 8, bit i % 8)."""
    bits = bytearray((n + 7) // 8)
    for i in indices:
        bits[i >> 3] |= 1 << (i & 7)
    return bytes(bits)


# ----------------------------------------------------------------------------------------------------- store
class WeightStore:
    """A node's local weight versions: publish, keep a window, serve chunks to peers, materialise tensors."""

    def __init__(self, root: str | Path, run_id: str, *, keep_versions: int = 4, chunk_bytes: int = CHUNK_BYTES,
                 cache_versions: int = 2):
        self.root = Path(root)
        self.run_id = run_id
        self.keep_versions = keep_versions
        self.chunk_bytes = chunk_bytes
        self.cache_versions = cache_versions
        for sub in ("chunks", "manifests", "partial"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._buffers: collections.OrderedDict[int, Buffer] = collections.OrderedDict()
        self._mem: dict[str, memoryview] = {}  # chunk hex -> bytes in a cached version's buffer
        self._exposed: dict[int, dict[str, memoryview]] = {}  # version being fetched -> chunks it already has
        self._fetching: dict[int, WeightManifest] = {}  # version being fetched -> its manifest
        self._held_bits: dict[int, bytearray] = {}  # version being fetched -> have-map of the chunks it has
        self._positions: dict[int, dict[str, list[int]]] = {}  # version being fetched -> chunk -> indices
        self._full_maps: dict[int, bytes] = {}  # complete version -> its (all ones) have-map
        self._decoded: collections.OrderedDict[tuple, WeightManifest] = collections.OrderedDict()
        self._incoming: dict[int, set[int]] = {}  # version being fetched -> chunk indices requested, not yet in
        self.served_chunks = 0
        self.served_bytes = 0
        self.served_chunks_by_peer: collections.Counter[str] = collections.Counter()
        self.requests_rejected = 0

    # -- queries ------------------------------------------------------------------------------------------
    def versions(self) -> list[int]:
        """Complete versions held, oldest first."""
        return sorted(int(p.stem) for p in (self.root / "manifests").glob("*.bin"))

    def latest(self) -> int | None:
        v = self.versions()
        return v[-1] if v else None

    def manifest(self, version: int) -> WeightManifest | None:
        """The verified manifest of a complete version held here, or None."""
        return self._read_manifest(self.root / "manifests" / f"{version}.bin")

    def partial_manifest(self, version: int) -> WeightManifest | None:
        return self._read_manifest(self.root / "partial" / f"{version}.bin")

    def has_chunk(self, hex_digest: str) -> bool:
        return self._in_memory(hex_digest) is not None or (self.root / "chunks" / hex_digest).exists()

    def have_map(self, version: int) -> bytes:
        """Bitmaps of the chunks of `version` held here, then of those being fetched (bit i = byte i // 8,
        bit i % 8); empty if none."""
        if (full := self._full_maps.get(version)) is not None:
            return full
        if (m := self.manifest(version)) is not None:
            n = len(m.chunks)
            self._full_maps[version] = _bitmap(range(n), n) + bytes((n + 7) // 8)
            return self._full_maps[version]
        if (m := self._fetching.get(version)) is None:
            return b""
        return bytes(self._held_bits[version]) + _bitmap(self._incoming.get(version, ()), len(m.chunks))

    def incoming(self, version: int) -> set[int]:
        """The live set of chunk indices of `version` a fetch has requested and not yet received (advertised in
        the have-map, so other fetchers get those chunks elsewhere)."""
        return self._incoming.setdefault(version, set())

    def _in_memory(self, hex_digest: str) -> memoryview | None:
        if (mv := self._mem.get(hex_digest)) is not None:
            return mv
        for chunks in self._exposed.values():
            if (mv := chunks.get(hex_digest)) is not None:
                return mv
        return None

    def read_chunk(self, hex_digest: str) -> bytes | memoryview | None:
        """A chunk's bytes (from memory when a live buffer holds it), or None."""
        if (mv := self._in_memory(hex_digest)) is not None:
            return mv
        try:
            return (self.root / "chunks" / hex_digest).read_bytes()
        except OSError:
            return None

    def buffer(self, version: int) -> Buffer:
        """The flat buffer of a complete version (cached, else read from disk into one preallocated buffer)."""
        if version in self._buffers:
            self._buffers.move_to_end(version)
            return self._buffers[version]
        manifest = self.manifest(version)
        if manifest is None:
            raise KeyError(f"version {version} is not held here")
        buf = aligned_buffer(manifest.total_bytes)
        for chunk, off in zip(manifest.chunks, manifest.chunk_offsets()):
            if not self._load_chunk_into(chunk, memoryview(buf)[off : off + chunk.size]):
                raise FetchError(f"version {version}: chunk {chunk.hex[:12]} missing or corrupt on disk")
        self._cache(version, manifest, buf)
        return buf

    def state_dict(self, version: int) -> dict[str, torch.Tensor]:
        """Tensors of a held version (views of its buffer: copy them into the model, do not keep them)."""
        manifest = self.manifest(version)
        if manifest is None:
            raise KeyError(f"version {version} is not held here")
        return tensors_from_buffer(manifest, self.buffer(version))

    # -- writing ------------------------------------------------------------------------------------------
    def publish(self, version: int, state: dict[str, torch.Tensor], identity: Identity, *,
                parent_version: int = -1, model_id: str = "") -> WeightManifest:
        """Write `state` as version `version` (new chunks only), sign its manifest, GC old versions."""
        tensors, total = plan_layout(state)
        buf = aligned_buffer(total)
        flatten_into(state, tensors, buf)
        chunks = cut_chunks(buf, self.chunk_bytes_for(total))
        manifest = WeightManifest.create(identity=identity, run_id=self.run_id, version=version,
                                         parent_version=parent_version, model_id=model_id,
                                         tensors=tensors, chunks=chunks)
        for chunk, off in zip(chunks, manifest.chunk_offsets()):
            if not (self.root / "chunks" / chunk.hex).exists():
                self.write_chunk(chunk.hex, memoryview(buf)[off : off + chunk.size])
        self.commit(manifest, buf)
        return manifest

    def chunk_bytes_for(self, total: int) -> int:
        """The configured chunk size, or the smallest block multiple that keeps a state of `total` bytes within
        the manifest's chunk limit (a 140 GB state gets ~8.5 MB chunks; the same size every version, so
        unchanged tensors are still reused)."""
        needed = -(-total // MAX_CHUNKS)
        return max(self.chunk_bytes, -(-needed // _BLOCK) * _BLOCK)

    def write_chunk(self, hex_digest: str, data: bytes | memoryview) -> None:
        """Persist one verified chunk atomically (tmp file + rename)."""
        path = self.root / "chunks" / hex_digest
        tmp = path.with_name(f".{hex_digest}.{os.getpid()}.{random.getrandbits(32):x}.tmp")
        view = memoryview(data)
        if not _direct_write(tmp, view):
            with open(tmp, "wb", buffering=0) as f:  # straight from the caller's buffer, no copy in between
                pos = 0
                while pos < len(view):
                    pos += f.write(view[pos:])
        os.replace(tmp, path)

    def begin(self, manifest: WeightManifest, buf: Buffer) -> None:
        """Record a version being fetched: its chunks survive GC and a restart resumes from them."""
        self._atomic_write(self.root / "partial" / f"{manifest.version}.bin", manifest.encode())
        self._exposed.setdefault(manifest.version, {})
        self._fetching[manifest.version] = manifest
        self._held_bits[manifest.version] = bytearray((len(manifest.chunks) + 7) // 8)
        positions = self._positions[manifest.version] = {}
        for i, chunk in enumerate(manifest.chunks):
            positions.setdefault(chunk.hex, []).append(i)
        for hex_digest, view in list(self._exposed[manifest.version].items()):  # a fetch resumed in this process
            self.expose_chunk(manifest.version, hex_digest, view)
        self._incoming[manifest.version] = set()

    def expose_chunk(self, version: int, hex_digest: str, view: memoryview) -> None:
        """Serve a verified chunk from memory (a fetch in progress shares what it already has)."""
        self._exposed.setdefault(version, {})[hex_digest] = view
        if (bits := self._held_bits.get(version)) is not None:
            for i in self._positions[version].get(hex_digest, ()):
                bits[i >> 3] |= 1 << (i & 7)

    def commit(self, manifest: WeightManifest, buf: Buffer) -> None:
        """Mark a version complete (all chunks on disk), cache its buffer, and GC beyond the window."""
        self._atomic_write(self.root / "manifests" / f"{manifest.version}.bin", manifest.encode())
        with contextlib.suppress(FileNotFoundError):
            (self.root / "partial" / f"{manifest.version}.bin").unlink()
        self._exposed.pop(manifest.version, None)
        self._fetching.pop(manifest.version, None)
        self._held_bits.pop(manifest.version, None)
        self._positions.pop(manifest.version, None)
        self._incoming.pop(manifest.version, None)
        self._cache(manifest.version, manifest, buf)
        self.gc()

    def gc(self) -> list[int]:
        """Drop complete versions beyond `keep_versions` and every chunk no kept manifest references."""
        versions = self.versions()
        dropped = versions[: max(0, len(versions) - self.keep_versions)]
        for v in dropped:
            with contextlib.suppress(FileNotFoundError):
                (self.root / "manifests" / f"{v}.bin").unlink()
            self._full_maps.pop(v, None)
            if v in self._buffers:
                del self._buffers[v]
        keep: set[str] = set()
        for sub in ("manifests", "partial"):
            for path in (self.root / sub).glob("*.bin"):
                if (m := self._read_manifest(path)) is not None:
                    keep.update(c.hex for c in m.chunks)
        for path in (self.root / "chunks").iterdir():
            if path.name not in keep and not path.name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        self._reindex_memory()
        return dropped

    # -- internals ----------------------------------------------------------------------------------------
    def _cache(self, version: int, manifest: WeightManifest, buf: Buffer) -> None:
        self._buffers[version] = buf
        self._buffers.move_to_end(version)
        while len(self._buffers) > self.cache_versions:
            self._buffers.popitem(last=False)
        self._reindex_memory(extra=(manifest, buf))

    def _reindex_memory(self, extra: tuple[WeightManifest, Buffer] | None = None) -> None:
        live = []
        for v, buf in self._buffers.items():
            m = extra[0] if extra and extra[0].version == v else self.manifest(v)
            if m is not None:
                live.append((m, buf))
        self._mem = {}
        for m, buf in live:
            view = memoryview(buf)
            for chunk, off in zip(m.chunks, m.chunk_offsets()):
                self._mem[chunk.hex] = view[off : off + chunk.size]

    def _load_chunk_into(self, chunk: ChunkEntry, dest: memoryview) -> bool:
        """Fill `dest` with a held chunk (memory or disk) if it is there and its hash checks out."""
        src = self._in_memory(chunk.hex)
        if src is not None and len(src) == chunk.size:
            dest[:] = src
            return True
        try:
            with open(self.root / "chunks" / chunk.hex, "rb") as f:
                if f.readinto(dest) != chunk.size or f.read(1):
                    return False
        except OSError:
            return False
        if hashlib.sha256(dest).digest() != chunk.sha256:
            logger.warning("chunk %s on disk is corrupt; dropping it", chunk.hex[:12])
            with contextlib.suppress(FileNotFoundError):
                (self.root / "chunks" / chunk.hex).unlink()
            return False
        return True

    def _read_manifest(self, path: Path) -> WeightManifest | None:
        """The verified manifest in `path`, or None. Decoded manifests are kept while the file is unchanged
        (same inode, size and mtime): GC, the memory index and every peer's manifest or have request read them,
        and each decode verifies a signature (a fifth of a tiny-model learner's publish time went to this)."""
        try:
            st = path.stat()
            key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
            if (m := self._decoded.get(key)) is not None:
                self._decoded.move_to_end(key)
                return m
            m = WeightManifest.decode(path.read_bytes())
        except (OSError, InvalidRecord):
            return None
        self._decoded[key] = m
        while len(self._decoded) > 4 * (self.keep_versions + 4):
            self._decoded.popitem(last=False)
        return m

    @staticmethod
    def _atomic_write(path: Path, data: bytes) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    # -- serving ------------------------------------------------------------------------------------------
    async def serve(self, p2p: P2P, *, idle_timeout: float = 60.0) -> None:
        """Serve this store's manifests and chunks on `p2p` (every holder serves)."""

        async def handler(info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = str(info.peer_id)
            try:
                while True:
                    req = await asyncio.wait_for(read_frame(reader, MAX_REQUEST_BYTES), idle_timeout)
                    if req is None or not await self._answer(unpack(req, MAX_REQUEST_BYTES), writer, peer):
                        break
            except InvalidRecord as exc:
                self.requests_rejected += 1
                logger.warning("weights: rejected request from %s: %s", peer[-8:], exc)
            except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
                pass
            finally:
                writer.close()

        await p2p.add_binary_stream_handler(protocol_name(self.run_id), handler)

    async def _answer(self, req: dict, writer: asyncio.StreamWriter, peer: str) -> bool:
        op = req.get("op")
        if op == "bye":
            return False
        if op in ("manifest", "have"):
            version = req.get("version")
            if not isinstance(version, int) or isinstance(version, bool):
                raise InvalidRecord(f"{op} request needs an int version")
            if op == "have":
                await write_frame(writer, self.have_map(version) if version >= 0 else b"")
                return True
            v = self.latest() if version < 0 else version
            m = self.manifest(v) if v is not None else None
            await write_frame(writer, m.encode() if m else b"")
            return True
        if op == "chunks":
            hashes = req.get("hashes")
            if not isinstance(hashes, list) or len(hashes) > MAX_HASHES_PER_REQUEST:
                raise InvalidRecord(f"chunk request needs a list of at most {MAX_HASHES_PER_REQUEST} hashes")
            for h in hashes:
                if not isinstance(h, bytes) or len(h) != 32:
                    raise InvalidRecord("chunk hash must be 32 bytes")
                data = self.read_chunk(h.hex())
                await write_frame(writer, data if data is not None else b"")
                if data is not None:
                    self.served_chunks += 1
                    self.served_bytes += len(data)
                    self.served_chunks_by_peer[peer] += 1
            return True
        raise InvalidRecord(f"unknown op {op!r}")


# --------------------------------------------------------------------------------------------------- fetcher
@dataclass
class FetchStats:
    """What one fetch did."""

    version: int
    total_bytes: int
    fetched_bytes: int = 0
    reused_bytes: int = 0
    bad_chunks: int = 0
    missing_chunks: int = 0
    seconds: float = 0.0
    chunks_by_holder: collections.Counter | None = None

    @property
    def bytes_per_second(self) -> float:
        return self.fetched_bytes / self.seconds if self.seconds > 0 else 0.0


_HAVE = -1  # an outstanding have-map request, in a worker's queue of answers


class _Work:
    """The chunks still wanted, who holds which (holders' have-maps), and which holder not to ask for what.

    A holder is asked only for chunks its latest have-map shows, rarest first (fewest known holders, then this
    fetcher's random order), so the publisher's upload goes to chunks no peer has yet and peers serve the rest.
    A holder that failed a chunk (bad hash, broken stream) is not asked for it again this round; one that
    answered "not yet" is asked again after `MISS_RETRY_S`.

    Scales to manifests of many thousand chunks: each holder has a heap of the pending chunks it holds, keyed
    by rarity, whose stale entries (chunk taken elsewhere, rarity changed) are dropped or re-keyed when they
    surface, so a take costs O(log n) and a have-map update O(chunks it changed), not O(n) per request.
    """

    MISS_RETRY_S = 0.3
    HAVE_REFRESH_S = 0.05

    def __init__(self, indices: Iterable[int], holders: list[str], max_failures: int, n_chunks: int,
                 incoming: set[int] | None = None):
        self.pending: dict[int, int] = {i: rank for rank, i in enumerate(indices)}  # chunk -> random rank
        self.rank = dict(self.pending)
        self.in_flight = 0
        self.failed: set[int] = set()
        self.failures: collections.Counter[int] = collections.Counter()
        self.misses: collections.Counter[int] = collections.Counter()
        self.excluded: dict[int, dict[str, float]] = collections.defaultdict(dict)  # chunk -> holder -> until
        self.holders = set(holders)
        self.max_failures = max_failures
        self.max_misses = 100 * max(1, len(holders))
        self.n_chunks = n_chunks
        self.have: dict[str, bytes] = {}  # holder -> bitmap of chunks it holds (absent: not known yet)
        self.coming: dict[str, bytes] = {}  # holder -> bitmap of chunks on their way to it
        self.held_count: dict[str, int] = {}
        self.count = [0] * n_chunks  # known holders per chunk, counting those it is on its way to
        self.heaps: dict[str, list[tuple[int, int, int]]] = {}  # holder -> (count, rank, chunk) it holds
        self.incoming = incoming if incoming is not None else set()  # ours, in flight (advertised to others)
        self.have_asked: dict[str, float] = {}  # holder -> when its have-map was last requested
        self.last_progress = time.monotonic()  # a chunk arrived or a holder gained one
        self.changed = asyncio.Event()

    def finished(self) -> bool:
        return not self.pending and not self.in_flight

    def can_help(self, holder: str) -> bool:
        """Whether some pending chunk may still come from `holder` (now or after a miss expires)."""
        blocked = sum(1 for i, until in self.excluded.items() if i in self.pending and until.get(holder) == math.inf)
        return len(self.pending) > blocked

    def complete(self, holder: str) -> bool:
        """Whether `holder`'s have-map shows every chunk (no need to ask it again)."""
        return self.held_count.get(holder, 0) == self.n_chunks

    def want_have(self, holder: str) -> bool:
        """Whether to ask `holder` for its have-map now (not complete, none asked recently); records the ask."""
        now = time.monotonic()
        if self.complete(holder) or now - self.have_asked.get(holder, -math.inf) < self.HAVE_REFRESH_S:
            return False
        self.have_asked[holder] = now
        return True

    def set_have(self, holder: str, answer: bytes) -> None:
        """Record `holder`'s have-map answer (held bitmap, then coming bitmap; empty: nothing)."""
        nb, mask = (self.n_chunks + 7) // 8, (1 << self.n_chunks) - 1
        held_bits = int.from_bytes(answer[:nb], "little") & mask
        coming_bits = int.from_bytes(answer[nb : 2 * nb], "little") & mask & ~held_bits
        held, coming = held_bits.to_bytes(nb, "little"), coming_bits.to_bytes(nb, "little")
        old = self.have.get(holder, bytes(nb))
        gained = [i for i in _set_bits(held, old) if _bit(held, i)]
        self._count(old, held)
        self._count(self.coming.get(holder, bytes(nb)), coming)
        self.have[holder], self.coming[holder] = held, coming
        self.held_count[holder] = held_bits.bit_count()
        heap = self.heaps.setdefault(holder, [])
        entries = [(self.count[i], self.pending[i], i) for i in gained if i in self.pending]
        if len(entries) > len(heap) // 8:  # many (a first map): one O(n) heapify beats n pushes
            heap.extend(entries)
            heapq.heapify(heap)
        else:
            for entry in entries:
                heapq.heappush(heap, entry)
        if gained:
            self.last_progress = time.monotonic()
            self._poke()

    def _count(self, old: bytes, new: bytes) -> None:
        """Apply a holder's bitmap change to the per-chunk holder counts; a chunk that got rarer is re-queued
        at its new rank for the holders that have it (one that got commoner is re-keyed when it surfaces)."""
        for i in _set_bits(new, old):
            if _bit(new, i):
                self.count[i] += 1
            else:
                self.count[i] -= 1
                if i in self.pending:
                    self._push(i)

    def _push(self, i: int) -> None:
        """Queue pending chunk `i` at its current rarity for every holder that has it."""
        entry = (self.count[i], self.pending[i], i)
        for holder, bits in self.have.items():
            if _bit(bits, i):
                heapq.heappush(self.heaps[holder], entry)

    def take(self, holder: str, n: int) -> list[int]:
        """Up to `n` pending chunks `holder` has, rarest first."""
        heap, now, got, later = self.heaps.get(holder, []), time.monotonic(), [], []
        while heap and len(got) < n:
            count, rank, i = heapq.heappop(heap)
            if i not in self.pending or not _bit(self.have[holder], i):
                continue  # taken from another holder or done (a chunk given back is queued again), or gone
            if count != self.count[i]:
                heapq.heappush(heap, (self.count[i], rank, i))  # commoner now: back in line at its rank
                continue
            until = self.excluded[i].get(holder, 0.0) if i in self.excluded else 0.0
            if until == math.inf:
                continue  # failed from this holder this round (new_round queues it again)
            if until > now:
                later.append((count, rank, i))  # "not yet" from this holder: ask again after a while
                continue
            got.append(i)
            del self.pending[i]
        for entry in later:
            heapq.heappush(heap, entry)
        self.incoming.update(got)
        self.in_flight += len(got)
        return got

    def give_back(self, indices: Iterable[int], holder: str | None = None, *, missing: bool = False) -> None:
        """Return chunks not delivered: `holder` failed them (or, with `missing`, did not have them yet)."""
        for i in indices:
            self.in_flight -= 1
            self.incoming.discard(i)
            if holder is not None:
                counter, limit = (self.misses, self.max_misses) if missing else (self.failures, self.max_failures)
                counter[i] += 1
                if counter[i] >= limit:
                    self.failed.add(i)
                    continue
                self.excluded[i][holder] = time.monotonic() + self.MISS_RETRY_S if missing else math.inf
            self.pending[i] = self.rank[i]
            self._push(i)
        self._poke()

    def done(self, i: int) -> None:
        self.in_flight -= 1
        self.incoming.discard(i)
        self.last_progress = time.monotonic()
        self._poke()

    def new_round(self) -> None:
        """Every holder may be asked for every pending chunk again."""
        self.excluded.clear()
        for holder, bits in self.have.items():
            self.heaps[holder] = [(self.count[i], r, i) for i, r in self.pending.items() if _bit(bits, i)]
            heapq.heapify(self.heaps[holder])

    def _poke(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


_NONZERO = re.compile(rb"[^\x00]")


def _bit(bits: bytes, i: int) -> bool:
    return bool(bits[i >> 3] >> (i & 7) & 1)


def _set_bits(a: bytes, b: bytes) -> Iterator[int]:
    """Indices whose bit differs between two bitmaps of equal length (O(length) bytes, O(1) per difference)."""
    diff = (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")
    for match in _NONZERO.finditer(diff):  # zero bytes are skipped at C speed
        byte_index, byte = match.start(), diff[match.start()]
        while byte:
            low = byte & -byte
            yield byte_index * 8 + low.bit_length() - 1
            byte ^= low


class WeightFetcher:
    """Fetches versions into a WeightStore from many holders in parallel, verifying everything.

    Each holder gets a window of requests in flight sized to `PIPELINE_S` of its measured rate (2 to
    `MAX_WINDOW` chunks): a fast holder streams without gaps, a slow one does not sit on chunks others could
    serve sooner."""

    PIPELINE_S = 0.1
    MAX_WINDOW = 8

    def __init__(self, p2p: P2P, store: WeightStore, allowed_publishers: Iterable[str], *,
                 streams_per_holder: int = 1, chunks_per_request: int = 1, window: int | None = None,
                 timeout: float = 30.0, max_rounds: int = 5):
        self.p2p = p2p
        self.store = store
        self.allowed_publishers = set(allowed_publishers)
        self.streams_per_holder = streams_per_holder
        self.chunks_per_request = chunks_per_request
        self.window = window  # chunks requested and not yet received, per stream (None: adapts to the holder)
        self.timeout = timeout
        self.max_rounds = max_rounds
        self.rejected_manifests = 0
        self.last_stats: FetchStats | None = None

    async def fetch_manifest(self, holders: list[PeerID], version: int = -1) -> WeightManifest:
        """The first valid manifest for `version` (-1: newest) any holder gives, signed by an allowed learner."""
        reasons = []
        for holder in holders:
            try:
                _, reader, writer = await asyncio.wait_for(
                    self.p2p.call_binary_stream_handler(holder, protocol_name(self.store.run_id)), self.timeout)
                try:
                    await write_frame(writer, pack({"op": "manifest", "version": version}))
                    data = await asyncio.wait_for(read_frame(reader, MAX_MANIFEST_BYTES), self.timeout)
                    await write_frame(writer, pack({"op": "bye"}))
                finally:
                    writer.close()
                if not data:
                    reasons.append(f"{str(holder)[-8:]}: does not hold version {version}")
                    continue
                return self.check_manifest(WeightManifest.decode(data), version)
            except InvalidRecord as exc:
                self.rejected_manifests += 1
                logger.warning("weights: rejected manifest from %s: %s", str(holder)[-8:], exc)
                reasons.append(f"{str(holder)[-8:]}: {exc}")
            except Exception as exc:  # unreachable holder, timeout, truncated answer
                reasons.append(f"{str(holder)[-8:]}: {type(exc).__name__} {exc}")
        raise FetchError(f"no valid manifest for version {version}: " + "; ".join(reasons or ["no holders"]))

    def check_manifest(self, m: WeightManifest, version: int = -1) -> WeightManifest:
        """Raise InvalidRecord unless `m` (signature already verified) is this run's, from an allowed learner."""
        if m.publisher not in self.allowed_publishers:
            raise InvalidRecord(f"manifest signed by {m.publisher[-8:]}, not one of the run's learner keys")
        if m.run_id != self.store.run_id:
            raise InvalidRecord(f"manifest for run {m.run_id!r}, not {self.store.run_id!r}")
        if version >= 0 and m.version != version:
            raise InvalidRecord(f"asked for version {version}, got {m.version}")
        return m

    async def fetch(self, holders: list[PeerID], version: int = -1, *,
                    progress: ProgressCallback | None = None) -> WeightManifest:
        """Make `version` (-1: the newest a holder has) complete in the store; returns its manifest."""
        if version >= 0 and (m := self.store.manifest(version)) is not None:
            return m
        start = time.perf_counter()
        manifest = self.store.partial_manifest(version) if version >= 0 else None
        if manifest is not None:
            self.check_manifest(manifest, version)
        else:
            manifest = await self.fetch_manifest(holders, version)
            if (m := self.store.manifest(manifest.version)) is not None:
                return m
        buf = aligned_buffer(manifest.total_bytes)  # the one preallocated buffer chunks land in
        self.store.begin(manifest, buf)
        stats = FetchStats(manifest.version, manifest.total_bytes, chunks_by_holder=collections.Counter())
        offsets = manifest.chunk_offsets()
        view = memoryview(buf)
        todo = []
        for i, (chunk, off) in enumerate(zip(manifest.chunks, offsets)):
            if self.store._load_chunk_into(chunk, view[off : off + chunk.size]):
                stats.reused_bytes += chunk.size
                self.store.expose_chunk(manifest.version, chunk.hex, view[off : off + chunk.size])
            else:
                todo.append(i)
        random.shuffle(todo)  # concurrent fetchers start on different chunks, so they can serve each other
        done_bytes = stats.reused_bytes
        if progress:
            progress(done_bytes, manifest.total_bytes)
        work = _Work(todo, [str(h) for h in holders], max_failures=self.max_rounds * max(1, len(holders)),
                     n_chunks=len(manifest.chunks), incoming=self.store.incoming(manifest.version))
        writes: list[asyncio.Future] = []

        def on_chunk(i: int, holder: str) -> None:
            nonlocal done_bytes
            chunk = manifest.chunks[i]
            piece = view[offsets[i] : offsets[i] + chunk.size]
            self.store.expose_chunk(manifest.version, chunk.hex, piece)
            # persisted in the background: a slow disk does not hold up reading (the bytes are in `buf` already)
            writes.append(asyncio.ensure_future(asyncio.to_thread(self.store.write_chunk, chunk.hex, piece)))
            stats.fetched_bytes += chunk.size
            stats.chunks_by_holder[holder] += 1
            done_bytes += chunk.size
            if progress:
                progress(done_bytes, manifest.total_bytes)

        for round_ in range(self.max_rounds):
            if not work.pending or not holders:
                break
            if round_:
                await asyncio.sleep(min(0.2 * 2 ** (round_ - 1), 5.0))
                work.new_round()
            workers = [self._worker(h, manifest, view, offsets, work, stats, on_chunk)
                       for h in holders for _ in range(self.streams_per_holder)]
            await asyncio.gather(*workers)
        if writes:
            await asyncio.gather(*writes)
        missing = len(work.pending) + len(work.failed)
        if missing:
            raise FetchError(f"version {manifest.version}: {missing} chunks unavailable from "
                             f"{len(holders)} holders (bad {stats.bad_chunks}, missing {stats.missing_chunks})")
        self.store.commit(manifest, buf)
        stats.seconds = time.perf_counter() - start
        self.last_stats = stats
        return manifest

    async def _worker(self, holder: PeerID, manifest: WeightManifest, view: memoryview, offsets: list[int],
                      work: _Work, stats: FetchStats, on_chunk: Callable[[int, str], None]) -> None:
        name = str(holder)
        sink: FrameSink | None = None
        outstanding: collections.deque[tuple[int, asyncio.Future[int]]] = collections.deque()  # asked, not read
        checks: collections.deque[asyncio.Future] = collections.deque()

        async def check(i: int, n: int) -> None:
            chunk = manifest.chunks[i]
            piece = view[offsets[i] : offsets[i] + chunk.size]
            if not n:
                stats.missing_chunks += 1
                work.give_back([i], name, missing=True)
            elif n != chunk.size or not await asyncio.to_thread(_hash_matches, chunk, piece):
                stats.bad_chunks += 1
                logger.warning("weights: bad chunk %s from %s (hash mismatch); trying another holder",
                               chunk.hex[:12], name[-8:])
                work.give_back([i], name)
            else:
                work.done(i)
                on_chunk(i, name)

        have_buf, have_asked = bytearray(2 * ((len(manifest.chunks) + 7) // 8)), False
        rate, last_arrival, window = 0.0, 0.0, self.window or 2  # this holder's bytes/s, measured
        try:
            _, reader, writer = await asyncio.wait_for(
                self.p2p.call_binary_stream_handler(holder, protocol_name(self.store.run_id)), self.timeout)
            sink = FrameSink.attach(reader, writer)  # chunks land in `view` directly
            while True:
                if not have_asked and work.want_have(name):  # what does this holder have by now?
                    outstanding.append((_HAVE, sink.expect(memoryview(have_buf))))
                    sink.send(pack({"op": "have", "version": manifest.version}))
                    have_asked = True
                # keep a window of requests in flight, so the holder never waits for our next request
                while len(outstanding) < window and name in work.have:
                    batch = work.take(name, min(self.chunks_per_request, window - len(outstanding)))
                    if not batch:
                        break
                    outstanding.extend((i, sink.expect(view[offsets[i] : offsets[i] + manifest.chunks[i].size]))
                                       for i in batch)
                    sink.send(pack({"op": "chunks", "hashes": [manifest.chunks[i].sha256 for i in batch]}))
                if not outstanding:
                    if work.finished() or (work.pending and not work.can_help(name)):
                        break  # all done, or nothing left that this holder has not failed
                    if not work.in_flight and time.monotonic() - work.last_progress > self.timeout:
                        break  # no holder has gained a missing chunk for a while: end this round
                    changed = work.changed  # chunks in flight elsewhere may come back, holders gain chunks
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(changed.wait(), _Work.HAVE_REFRESH_S)
                    continue
                i, answer = outstanding[0]
                n = await asyncio.wait_for(answer, self.timeout)
                outstanding.popleft()
                if i == _HAVE:
                    if n not in (0, len(have_buf)):
                        raise InvalidRecord(f"have-map of {n} bytes for {len(manifest.chunks)} chunks")
                    work.set_have(name, have_buf[:n])
                    have_asked = False
                    continue
                now = time.monotonic()
                if last_arrival and now > last_arrival:
                    sample = n / (now - last_arrival)
                    rate = 0.7 * rate + 0.3 * sample if rate else sample
                    if not self.window:
                        window = max(2, min(self.MAX_WINDOW, 1 + math.ceil(rate * self.PIPELINE_S / max(1, n))))
                last_arrival = now
                checks.append(asyncio.ensure_future(check(i, n)))  # hash and persist off the loop; keep reading
                while len(checks) > self.MAX_WINDOW:  # hashing may lag; the bytes are in place
                    await checks.popleft()
            await asyncio.gather(*checks)
            sink.send(pack({"op": "bye"}))
        except InvalidRecord as exc:
            logger.warning("weights: holder %s broke protocol: %s", name[-8:], exc)
            self._drop(sink, outstanding, work, name)
        except Exception as exc:  # timeouts, resets, truncated streams, daemon errors: another holder takes over
            logger.info("weights: holder %s failed (%s: %s); others continue", name[-8:], type(exc).__name__, exc)
            self._drop(sink, outstanding, work, name)
        finally:
            if sink is not None:
                sink.close()
            if checks:
                await asyncio.gather(*checks, return_exceptions=True)

    @staticmethod
    def _drop(sink: FrameSink | None, outstanding: collections.deque, work: _Work, holder: str) -> None:
        """Stop the stream first (nothing more lands in the buffer), then give its chunks to other holders."""
        if sink is not None:
            sink.close()
        work.give_back([i for i, _ in outstanding if i != _HAVE], holder)
        outstanding.clear()



def _hash_matches(chunk: ChunkEntry, piece: memoryview) -> bool:
    """In a worker thread (hashlib releases the GIL for large buffers)."""
    return hashlib.sha256(piece).digest() == chunk.sha256


@contextlib.contextmanager
def fetch_progress(description: str, *, emit: Callable[[str], None] | None = None, interactive: bool | None = None,
                   after_s: float = 2.0, every_s: float = 10.0) -> Iterator[ProgressCallback]:
    """A progress callback for a person, for downloads that take longer than `after_s`: on a terminal (stderr is
    one, unless `interactive` says otherwise) a rich bar with bytes, rate and time left that goes away when done;
    elsewhere (logs, the demo's prefixed output) a line through `emit` every `every_s` seconds. Quick fetches,
    such as a small model's every few seconds, show nothing."""
    interactive = sys.stderr.isatty() if interactive is None else interactive
    start = time.monotonic()
    last_line = -math.inf
    bar = task = None

    def update(done: int, total: int) -> None:
        nonlocal bar, task, last_line
        now = time.monotonic()
        if now - start < after_s or done >= total:
            return
        if interactive:
            if bar is None:
                from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                           TransferSpeedColumn)

                bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                               TimeRemainingColumn(), transient=True)
                bar.start()
                task = bar.add_task(description, total=total)
            bar.update(task, completed=done, total=total)
        elif emit is not None and now - last_line >= every_s:
            last_line = now
            emit(f"{description}: {done / 1e6:,.0f} of {total / 1e6:,.0f} MB ({done / total:.0%}) after "
                 f"{now - start:.0f} s")

    try:
        yield update
    finally:
        if bar is not None:
            bar.stop()
