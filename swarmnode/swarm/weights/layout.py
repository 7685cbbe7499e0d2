"""How a state dict lies in one flat buffer, how that buffer is cut into chunks, and how chunks reach the disk.

A state dict becomes one flat buffer (tensors back to back, 64-byte aligned, raw bytes as in safetensors) cut
into fixed-size chunks named by their sha256 (4 MiB; bigger, the same every version, for a state that would
exceed the manifest's chunk limit). Buffers are page-aligned anonymous mappings, so a chunk can go to disk with
O_DIRECT straight from the buffer (no page-cache copy).
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from swarmnode.model.adapters import check_adapter_tensors
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.manifest import MAX_CHUNKS, ChunkEntry, TensorEntry, WeightManifest, dtype_fits

CHUNK_BYTES = 4 << 20
ALIGN = 64
BLOCK = 4096  # O_DIRECT alignment (address and length)
DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float64: "float64",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
TORCH_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}

Buffer = bytearray | mmap.mmap  # a version's flat buffer (writable, fixed size)


def plan_layout(state: dict[str, torch.Tensor]) -> tuple[list[TensorEntry], int]:
    """Tensor index of the flat buffer (64-byte aligned offsets) and its total size."""
    entries, pos = [], 0
    for name, t in state.items():
        if t.dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} cannot be published")
        pos = -(-pos // ALIGN) * ALIGN
        nbytes = t.numel() * t.element_size()
        entries.append(TensorEntry(name, DTYPE_NAMES[t.dtype], tuple(t.shape), pos, nbytes))
        pos += nbytes
    return entries, pos


@dataclass(frozen=True)
class ModelLayout:
    """What a node's model holds: each tensor's dtype and shape, and the largest flat buffer a version of it can
    have (floating tensors at 4 bytes: `learner.publish_dtype` may publish them in any floating dtype, `dtype_fits`).
    A manifest must fit it before anything is allocated for it, so a signed manifest claiming a terabyte costs its
    reader nothing (the protocol's own limits allow 16,384 chunks of 64 MiB). An adapter-only manifest must name
    this node's base weights (`base_hash`, see `swarmnode.model.adapters`) and hold LoRA tensors that fit its
    modules."""

    tensors: dict[str, tuple[str, tuple[int, ...]]]  # name -> (dtype name, shape)
    total_bytes: int
    base_hash: bytes | None = None  # the content hash of the base weights adapters apply to (None: unknown)

    @classmethod
    def of(cls, state: dict[str, torch.Tensor], base_hash: bytes | None = None) -> ModelLayout:
        """The layout of a state dict (meta tensors will do: only names, dtypes and shapes are read)."""
        entries, _ = plan_layout(state)
        widest = 0
        for t in state.values():
            item = max(t.element_size(), 4) if t.is_floating_point() else t.element_size()
            widest = -(-widest // ALIGN) * ALIGN + t.numel() * item
        return cls({e.name: (e.dtype, tuple(e.shape)) for e in entries}, widest, base_hash)

    def check(self, manifest: WeightManifest) -> None:
        """Raise InvalidRecord unless every tensor of `manifest` is one of this model's, with its dtype and shape,
        and its buffer is no bigger than this model's (plus alignment); for an adapter-only manifest, unless it
        names this node's base weights and its tensors are LoRA adapters of this model's modules."""
        if manifest.adapter is not None:
            return self._check_adapter(manifest)
        if manifest.total_bytes > self.total_bytes + ALIGN * len(self.tensors):
            raise InvalidRecord(
                f"manifest of {manifest.total_bytes:,} bytes; this node's model has {self.total_bytes:,}"
            )
        for t in manifest.tensors:
            want = self.tensors.get(t.name)
            if want is None:
                raise InvalidRecord(f"manifest tensor {t.name!r} is not in this node's model")
            if not dtype_fits(t.dtype, want[0]) or tuple(t.shape) != want[1]:
                raise InvalidRecord(
                    f"manifest tensor {t.name!r} is {t.dtype} {list(t.shape)}, this node's model has "
                    f"{want[0]} {list(want[1])} (is model.name/model.dtype the learner's?)"
                )

    def _check_adapter(self, manifest: WeightManifest) -> None:
        spec = manifest.adapter
        if spec is None or spec.base_hash != self.base_hash:
            mine = self.base_hash.hex()[:16] if self.base_hash else "unknown"
            theirs = spec.base_hash.hex()[:16] if spec is not None else "none named"
            raise InvalidRecord(
                f"adapter version {manifest.version} is for base weights {theirs}, "
                f"this node's base weights are {mine}: refused (is model.name/model.dtype the "
                "learner's?)"
            )
        if manifest.total_bytes > self.total_bytes + ALIGN * len(manifest.tensors):
            raise InvalidRecord(
                f"adapter of {manifest.total_bytes:,} bytes; this node's model has {self.total_bytes:,}"
            )
        try:
            check_adapter_tensors({t.name: (t.dtype, tuple(t.shape)) for t in manifest.tensors}, spec, self.tensors)
        except ValueError as exc:
            raise InvalidRecord(f"adapter version {manifest.version}: {exc}") from None


def chunk_size_for(total: int, base: int = CHUNK_BYTES) -> int:
    """`base`, or the smallest block multiple that keeps a state of `total` bytes within the manifest's chunk
    limit (a 140 GB state gets ~8.5 MB chunks; the same size every version, so unchanged tensors are reused)."""
    needed = -(-total // MAX_CHUNKS)
    return max(base, -(-needed // BLOCK) * BLOCK)


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
        dtype = TORCH_DTYPES[e.dtype]
        if e.nbytes == 0:
            out[e.name] = torch.empty(e.shape, dtype=dtype)
        else:
            count = e.nbytes // torch.empty(0, dtype=dtype).element_size()
            out[e.name] = torch.frombuffer(buf, dtype=dtype, count=count, offset=e.offset).reshape(e.shape)
    return out


def cut_chunks(buf: Buffer, chunk_bytes: int) -> list[ChunkEntry]:
    """Fixed-size chunks of `buf` with their sha256."""
    view = memoryview(buf)
    return [
        ChunkEntry(hashlib.sha256(view[i : i + chunk_bytes]).digest(), len(view[i : i + chunk_bytes]))
        for i in range(0, len(buf), chunk_bytes)
    ]


def hash_matches(chunk: ChunkEntry, piece: memoryview) -> bool:
    """Whether `piece` is `chunk` (run it in a worker thread: hashlib releases the GIL for large buffers)."""
    return hashlib.sha256(piece).digest() == chunk.sha256


def aligned_buffer(n: int) -> Buffer:
    """A zeroed, page-aligned, writable buffer of `n` bytes (an anonymous mapping): chunks in it can go to disk
    with O_DIRECT, straight from the buffer."""
    return mmap.mmap(-1, n) if n else bytearray()


def direct_write(path: Path, view: memoryview) -> bool:
    """Write `view` to a new file with O_DIRECT (the disk reads the buffer; no copy into the page cache) when
    buffer and length are block-aligned and the filesystem allows it; False means: write it the usual way."""
    if not hasattr(os, "O_DIRECT") or len(view) % BLOCK or view.readonly:
        return False
    if ctypes.addressof(ctypes.c_char.from_buffer(view)) % BLOCK:
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


def write_file(path: Path, data: bytes | memoryview) -> None:
    """Write `data` to a new file at `path`: O_DIRECT when possible, else unbuffered from the caller's buffer."""
    view = memoryview(data)
    if not direct_write(path, view):
        with open(path, "wb", buffering=0) as f:  # straight from the caller's buffer, no copy in between
            pos = 0
            while pos < len(view):
                pos += f.write(view[pos:])
