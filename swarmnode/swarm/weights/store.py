"""A node's local weight versions on disk: publish, keep a window, hand chunks to the server and the fetcher.

On disk, under the store's root:

    chunks/<sha256 hex>          verified chunk bytes (shared by every version that contains them)
    manifests/<version>.bin      complete versions (all chunks present)
    partial/<version>.bin        a version being fetched (its chunks are kept by GC; a restart resumes)

A version being fetched exposes the chunks it already has (from memory), so a fetching peer serves them too.
Disk use is bounded: complete versions beyond `keep_versions` and every chunk no kept manifest needs are
collected, never the version just written; at most one partial version is kept (the newest: an older one, or
one at or below a complete version, is dropped with its chunks), and temporary files of writes a dead process
left behind are removed when the store opens.

Versions are numbered per learner line: a run restarted with a fresh learner under the same run id begins again
at version 0 while a node's store may still hold an earlier line's higher versions. Writing or fetching a
version therefore first drops the held versions above it that another key signed (`_drop_other_lines`): they
are not the run's future, and kept they would push the new line's versions out of the window at once.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import os
import random
import re
from pathlib import Path

import torch

from swarmnode.atomic import replacing, write_atomic
from swarmnode.diskspace import DiskFullError, SpaceWatch, is_disk_full, raise_if_full
from swarmnode.errors import ExitCode, SwarmnodeError
from swarmnode.identity import Identity
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.manifest import AdapterSpec, ChunkEntry, WeightManifest
from swarmnode.swarm.weights.havemap import bitmap
from swarmnode.swarm.weights.layout import (
    CHUNK_BYTES,
    Buffer,
    aligned_buffer,
    chunk_size_for,
    cut_chunks,
    flatten_into,
    plan_layout,
    tensors_from_buffer,
    write_file,
)

logger = logging.getLogger(__name__)


class FetchError(SwarmnodeError, RuntimeError):
    """A version could not be fetched from any holder, or read back from disk; the message says why."""

    exit_code = ExitCode.NETWORK


class WeightStore:
    """A node's local weight versions: publish, keep a window, serve chunks to peers, materialise tensors."""

    def __init__(
        self,
        root: str | Path,
        run_id: str,
        *,
        keep_versions: int = 4,
        chunk_bytes: int = CHUNK_BYTES,
        cache_versions: int = 2,
    ):
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
        # the node's notice of a full disk (`swarmnode.diskspace`): a version that does not fit is not begun
        self.space: SpaceWatch | None = None
        self._remove_orphan_temp_files()
        self._drop_superseded_partials()

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

    def have_map(self, version: int) -> bytes:
        """Bitmaps of the chunks of `version` held here, then of those being fetched (bit i = byte i // 8,
        bit i % 8); empty if none."""
        if (full := self._full_maps.get(version)) is not None:
            return full
        if (m := self.manifest(version)) is not None:
            n = len(m.chunks)
            self._full_maps[version] = bitmap(range(n), n) + bytes((n + 7) // 8)
            return self._full_maps[version]
        if (m := self._fetching.get(version)) is None:
            return b""
        return bytes(self._held_bits[version]) + bitmap(self._incoming.get(version, ()), len(m.chunks))

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
            if not self.load_chunk_into(chunk, memoryview(buf)[off : off + chunk.size]):
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
    def publish(
        self,
        version: int,
        state: dict[str, torch.Tensor],
        identity: Identity,
        *,
        parent_version: int = -1,
        model_id: str = "",
        adapter: AdapterSpec | None = None,
    ) -> WeightManifest:
        """Write `state` as version `version` (new chunks only), sign its manifest, GC old versions. With
        `adapter`, `state` is LoRA adapter tensors for the base that `adapter` names (an adapter-only version)."""
        tensors, total = plan_layout(state)
        self.check_space(total, f"publishing version {version}")
        buf = aligned_buffer(total)
        flatten_into(state, tensors, buf)
        chunks = cut_chunks(buf, chunk_size_for(total, self.chunk_bytes))
        manifest = WeightManifest.create(
            identity=identity,
            run_id=self.run_id,
            version=version,
            parent_version=parent_version,
            model_id=model_id,
            tensors=tensors,
            chunks=chunks,
            adapter=adapter,
        )
        for chunk, off in zip(chunks, manifest.chunk_offsets()):
            if not (self.root / "chunks" / chunk.hex).exists():
                self.write_chunk(chunk.hex, memoryview(buf)[off : off + chunk.size])
        self.commit(manifest, buf)
        return manifest

    def check_space(self, need: int, what: str) -> None:
        """Raise `DiskFullError` (said once by `space`) unless `need` bytes fit on the store's disk now."""
        if self.space is not None and not self.space.wait_for(need, what):
            raise DiskFullError(self.space.short or what, self.root, need)

    def write_chunk(self, hex_digest: str, data: bytes | memoryview) -> None:
        """Persist one verified chunk atomically (tmp file + rename); a full disk leaves no partial file."""
        path = self.root / "chunks" / hex_digest
        try:
            with replacing(path, tmp=_temp_path(path)) as part:
                write_file(part, data)
        except OSError as exc:
            if is_disk_full(exc) and self.space is not None:
                self.space.full(f"chunk {hex_digest[:12]}", len(data))
            raise_if_full(exc, self.root, f"chunk {hex_digest[:12]}", len(data))
            raise

    def begin(self, manifest: WeightManifest, buf: Buffer) -> None:
        """Record a version being fetched: its chunks survive GC and a restart resumes from them (an older
        partial version is dropped). `DiskFullError` first, writing nothing, when the version does not fit."""
        self.check_space(manifest.total_bytes, f"version {manifest.version}")
        self._write_manifest(self.root / "partial" / f"{manifest.version}.bin", manifest)
        self._exposed.setdefault(manifest.version, {})
        self._fetching[manifest.version] = manifest
        self._held_bits[manifest.version] = bytearray((len(manifest.chunks) + 7) // 8)
        positions = self._positions[manifest.version] = {}
        for i, chunk in enumerate(manifest.chunks):
            positions.setdefault(chunk.hex, []).append(i)
        for hex_digest, view in list(self._exposed[manifest.version].items()):  # a fetch resumed in this process
            self.expose_chunk(manifest.version, hex_digest, view)
        self._incoming[manifest.version] = set()
        self._drop_other_lines(manifest)
        self._drop_superseded_partials()

    def expose_chunk(self, version: int, hex_digest: str, view: memoryview) -> None:
        """Serve a verified chunk from memory (a fetch in progress shares what it already has)."""
        self._exposed.setdefault(version, {})[hex_digest] = view
        if (bits := self._held_bits.get(version)) is not None:
            for i in self._positions[version].get(hex_digest, ()):
                bits[i >> 3] |= 1 << (i & 7)

    def commit(self, manifest: WeightManifest, buf: Buffer) -> None:
        """Mark a version complete (all chunks on disk), cache its buffer, and GC beyond the window."""
        self._write_manifest(self.root / "manifests" / f"{manifest.version}.bin", manifest)
        with contextlib.suppress(FileNotFoundError):
            (self.root / "partial" / f"{manifest.version}.bin").unlink()
        self._exposed.pop(manifest.version, None)
        self._fetching.pop(manifest.version, None)
        self._held_bits.pop(manifest.version, None)
        self._positions.pop(manifest.version, None)
        self._incoming.pop(manifest.version, None)
        self._cache(manifest.version, manifest, buf)
        self._drop_other_lines(manifest)
        self._drop_superseded_partials(gc=False)
        self.gc(keep=manifest.version)

    def partial_versions(self) -> list[int]:
        """Versions with a partial manifest on disk, oldest first."""
        return sorted(int(p.stem) for p in (self.root / "partial").glob("*.bin"))

    def abandon(self, version: int) -> None:
        """Forget a partial version: its manifest, what a fetch in this process exposed, and (GC) its chunks."""
        self._forget_partial(version)
        self.gc()

    def end_fetch(self, version: int) -> None:
        """A fetch of `version` ended without completing: stop serving from its buffer; its partial manifest stays
        for a later fetch to resume (unless a newer partial version supersedes it)."""
        for state in (self._exposed, self._fetching, self._held_bits, self._positions, self._incoming):
            state.pop(version, None)
        self._drop_superseded_partials()

    def _forget_partial(self, version: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.root / "partial" / f"{version}.bin").unlink()
        for state in (self._exposed, self._fetching, self._held_bits, self._positions, self._incoming):
            state.pop(version, None)

    def _drop_superseded_partials(self, gc: bool = True) -> None:
        """Keep only the newest partial version, and none at or below the newest complete version."""
        partial, latest = self.partial_versions(), self.latest()
        stale = [v for v in partial[:-1] if v not in self._fetching]
        stale += [v for v in partial[-1:] if latest is not None and v <= latest]
        for v in stale:
            self._forget_partial(v)
        if stale and gc:
            self.gc()

    def _remove_orphan_temp_files(self) -> None:
        """Remove `*.tmp` files whose writer (the pid in their name) is no longer running."""
        for path in self.root.glob("*/*.tmp"):
            match = re.search(r"\.(\d+)\.[0-9a-f]+\.tmp$", path.name)
            if match is None or not _pid_alive(int(match.group(1))):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    def _drop_other_lines(self, manifest: WeightManifest) -> None:
        """Drop the complete versions above `manifest`'s that another key signed (see the module docstring)."""
        newer = [v for v in self.versions() if v > manifest.version]
        other = [v for v in newer if (m := self.manifest(v)) is None or m.publisher != manifest.publisher]
        if other:
            logger.warning(
                "weights: dropping versions %s held here: signed by another learner than version %d "
                "(%s), an earlier run under run id %r",
                _span(other),
                manifest.version,
                manifest.publisher[-8:],
                self.run_id,
            )
            for v in other:
                self._drop_version(v)

    def _drop_version(self, version: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.root / "manifests" / f"{version}.bin").unlink()
        self._full_maps.pop(version, None)
        self._buffers.pop(version, None)

    def gc(self, keep: int | None = None) -> list[int]:
        """Drop complete versions beyond `keep_versions` (never `keep`, a version just written) and every chunk no
        kept manifest references."""
        versions = [v for v in self.versions() if v != keep]
        dropped = versions[: max(0, len(versions) + (keep is not None) - self.keep_versions)]
        for v in dropped:
            self._drop_version(v)
        referenced: set[str] = set()
        for sub in ("manifests", "partial"):
            for path in (self.root / sub).glob("*.bin"):
                if (m := self._read_manifest(path)) is not None:
                    referenced.update(c.hex for c in m.chunks)
        for path in (self.root / "chunks").iterdir():
            if path.name not in referenced and not path.name.endswith(".tmp"):
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

    def load_chunk_into(self, chunk: ChunkEntry, dest: memoryview) -> bool:
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

    def _write_manifest(self, path: Path, manifest: WeightManifest) -> None:
        """Write a verified manifest atomically and remember it decoded: GC and the memory index read it right
        after, and decoding our own file again would verify its signature once more (4 of the 10 ms a tiny-model
        publish took)."""
        self._atomic_write(path, manifest.encode())
        st = path.stat()
        self._remember((str(path), st.st_ino, st.st_size, st.st_mtime_ns), manifest)

    def _remember(self, key: tuple, manifest: WeightManifest) -> None:
        self._decoded[key] = manifest
        while len(self._decoded) > 4 * (self.keep_versions + 4):
            self._decoded.popitem(last=False)

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
        self._remember(key, m)
        return m

    @staticmethod
    def _atomic_write(path: Path, data: bytes) -> None:
        try:
            write_atomic(path, data, tmp=_temp_path(path))
        except OSError as exc:
            raise_if_full(exc, path.parent, path.name, len(data))
            raise


def _span(versions: list[int]) -> str:
    """`[3, 4, 5]` -> "3-5", `[3, 5]` -> "3, 5", `[7]` -> "7" (sorted versions)."""
    if len(versions) > 2 and versions[-1] - versions[0] == len(versions) - 1:
        return f"{versions[0]}-{versions[-1]}"
    return ", ".join(map(str, versions))


def _temp_path(path: Path) -> Path:
    """A hidden temporary sibling of `path` named after this process (see `_remove_orphan_temp_files`)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{random.getrandbits(32):x}.tmp")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True
