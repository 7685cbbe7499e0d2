"""WeightManifest: what a learner signs when it publishes a policy version.

The manifest names every tensor (name, dtype, shape, byte offset in one flat safetensors-like buffer) and
the content-addressed chunks (sha256, size) that buffer is cut into, in order: chunk i covers bytes
[sum(size[:i]), sum(size[:i+1])). A fetcher checks the signature against the run's learner keys, then every
chunk against its hash; a chunk unchanged from the parent version has the same hash and is not fetched again.

Floating tensors are in the run's `learner.publish_dtype` (by default the model's own dtype): a node loads a
version into its own `model.dtype` (`dtype_fits`), so a float32 run may fetch bf16 versions at half the bytes.

A version is either full weights (the model's own tensor names) or adapter-only (`adapter` set): LoRA tensors
under peft's names, applied to the base model named by its content hash (`AdapterSpec`). A full-weight manifest
has no `adapter` field on the wire, so its signed bytes are what they were before adapter versions existed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from swarmnode.identity import Identity
from swarmnode.protocol.codec import (
    MAX_VERSION,
    InvalidRecord,
    bytes_field,
    check_signature,
    float_field,
    int_field,
    list_field,
    pack,
    sign_fields,
    str_field,
    unpack,
)

MAX_MANIFEST_BYTES = 1 << 20  # a 7B model in 4 MiB chunks needs ~150 KB; page beyond this if ever needed
MAX_TENSORS = 8192
MAX_CHUNKS = 16384
MAX_DIMS = 8
MAX_TOTAL_BYTES = 1 << 40
MAX_CHUNK_BYTES = 64 << 20
HASH_BYTES = 32
DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")
FLOAT_DTYPES = ("float32", "bfloat16", "float16")  # a version may carry a model's floats in any (publish_dtype)


def dtype_fits(published: str, model: str) -> bool:
    """Whether a tensor published in dtype `published` loads into a model's tensor of dtype `model`: the same
    dtype, or two of `FLOAT_DTYPES` (`learner.publish_dtype` cast it, the loader casts it back)."""
    return published == model or (published in FLOAT_DTYPES and model in FLOAT_DTYPES)


@dataclass(frozen=True)
class TensorEntry:
    """One tensor's place in the flat buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclass(frozen=True)
class ChunkEntry:
    """One content-addressed chunk of the flat buffer."""

    sha256: bytes
    size: int

    @property
    def hex(self) -> str:
        return self.sha256.hex()


MAX_TARGET_MODULES = 64


@dataclass(frozen=True)
class AdapterSpec:
    """What an adapter-only version needs to be applied: the base weights' content hash (sha256, see
    `swarmnode.model.adapters.weights_hash`) and the LoRA configuration (rank, alpha, adapted module names)."""

    base_hash: bytes
    r: int
    alpha: float
    target_modules: tuple[str, ...]

    @property
    def scale(self) -> float:
        """The factor the low-rank update B A is multiplied by (peft's lora_alpha / r)."""
        return self.alpha / self.r

    def to_wire(self) -> list:
        return [self.base_hash, self.r, self.alpha, list(self.target_modules)]

    @classmethod
    def from_wire(cls, item: Any) -> AdapterSpec:
        if not isinstance(item, (list, tuple)) or len(item) != 4:
            raise InvalidRecord("adapter must be [base_hash, r, alpha, target_modules]")
        obj = dict(zip(("base_hash", "r", "alpha", "target_modules"), item))
        targets = list_field(obj, "target_modules", MAX_TARGET_MODULES, lambda t: str_field({"t": t}, "t", 128, 1))
        if not targets:
            raise InvalidRecord("adapter names no target module")
        return cls(
            bytes_field(obj, "base_hash", HASH_BYTES, exact=HASH_BYTES),
            int_field(obj, "r", 1, 4096),
            float_field(obj, "alpha", 1e-9, 1e9),
            tuple(targets),
        )


@dataclass
class WeightManifest:
    """A signed description of one policy version's weights."""

    run_id: str
    version: int
    parent_version: int  # -1: none
    model_id: str
    tensors: list[TensorEntry]
    chunks: list[ChunkEntry]
    total_bytes: int
    publisher: str
    created_at: float = field(default_factory=time.time)
    signature: bytes = b""
    adapter: AdapterSpec | None = None  # set: an adapter-only version for this base model (see the module doc)

    @property
    def kind(self) -> str:
        """'adapter' (LoRA tensors only) or 'full' (the model's weights)."""
        return "full" if self.adapter is None else "adapter"

    # -- building -----------------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        *,
        identity: Identity,
        run_id: str,
        version: int,
        parent_version: int,
        model_id: str,
        tensors: list[TensorEntry],
        chunks: list[ChunkEntry],
        adapter: AdapterSpec | None = None,
    ) -> WeightManifest:
        """Build, validate and sign a manifest as `identity` (`adapter`: an adapter-only version)."""
        total = sum(c.size for c in chunks)
        m = cls(
            run_id,
            version,
            parent_version,
            model_id,
            list(tensors),
            list(chunks),
            total,
            identity.peer_id,
            adapter=adapter,
        )
        m._check_layout()
        m.signature = sign_fields(m._fields(), identity)
        return m

    def chunk_offsets(self) -> list[int]:
        """Start offset of every chunk in the flat buffer."""
        offsets, pos = [], 0
        for c in self.chunks:
            offsets.append(pos)
            pos += c.size
        return offsets

    # -- wire -----------------------------------------------------------------------------------------------
    def _fields(self) -> dict[str, Any]:
        fields = {
            "run_id": self.run_id,
            "version": self.version,
            "parent_version": self.parent_version,
            "model_id": self.model_id,
            "tensors": [[t.name, t.dtype, list(t.shape), t.offset, t.nbytes] for t in self.tensors],
            "chunks": [[c.sha256, c.size] for c in self.chunks],
            "total_bytes": self.total_bytes,
            "publisher": self.publisher,
            "created_at": self.created_at,
        }
        if self.adapter is not None:
            fields["adapter"] = self.adapter.to_wire()
        return fields

    def encode(self) -> bytes:
        data = pack({**self._fields(), "signature": self.signature})
        if len(data) > MAX_MANIFEST_BYTES:
            raise InvalidRecord(f"manifest of {len(data)} bytes exceeds {MAX_MANIFEST_BYTES}; use larger chunks")
        return data

    @classmethod
    def decode(cls, data: bytes, max_bytes: int = MAX_MANIFEST_BYTES) -> WeightManifest:
        """Parse, validate and verify the signature (against the claimed publisher); only InvalidRecord."""
        obj = unpack(data, min(max_bytes, MAX_MANIFEST_BYTES))
        m = cls(
            run_id=str_field(obj, "run_id", 64, 1),
            version=int_field(obj, "version", 0, MAX_VERSION),
            parent_version=int_field(obj, "parent_version", -1, MAX_VERSION),
            model_id=str_field(obj, "model_id", 512),
            tensors=list_field(obj, "tensors", MAX_TENSORS, _tensor),
            chunks=list_field(obj, "chunks", MAX_CHUNKS, _chunk),
            total_bytes=int_field(obj, "total_bytes", 0, MAX_TOTAL_BYTES),
            publisher=str_field(obj, "publisher", 128, 1),
            created_at=float_field(obj, "created_at", 0.0, 1e11),
            signature=bytes_field(obj, "signature", 64, exact=64),
            adapter=AdapterSpec.from_wire(obj["adapter"]) if "adapter" in obj else None,
        )
        m._check_layout()
        check_signature(m._fields(), m.publisher, m.signature)
        return m

    def _check_layout(self) -> None:
        if self.parent_version >= self.version:
            raise InvalidRecord(f"parent_version {self.parent_version} not below version {self.version}")
        if sum(c.size for c in self.chunks) != self.total_bytes:
            raise InvalidRecord("chunk sizes do not add up to total_bytes")
        names: set[str] = set()
        for t in self.tensors:
            if t.name in names:
                raise InvalidRecord(f"tensor {t.name!r} listed twice")
            names.add(t.name)
            if t.offset + t.nbytes > self.total_bytes:
                raise InvalidRecord(f"tensor {t.name!r} runs past the end of the buffer")
            if t.nbytes != _numel(t.shape) * _itemsize(t.dtype):
                raise InvalidRecord(f"tensor {t.name!r}: nbytes does not match dtype and shape")


_ITEMSIZE = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


def _itemsize(dtype: str) -> int:
    return _ITEMSIZE[dtype]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _tensor(item: Any) -> TensorEntry:
    if not isinstance(item, (list, tuple)) or len(item) != 5:
        raise InvalidRecord("tensor entry must be [name, dtype, shape, offset, nbytes]")
    obj = dict(zip(("name", "dtype", "shape", "offset", "nbytes"), item))
    dtype = str_field(obj, "dtype", 16)
    if dtype not in DTYPES:
        raise InvalidRecord(f"tensor dtype {dtype!r} not supported")
    shape = list_field(obj, "shape", MAX_DIMS, lambda d: int_field({"dim": d}, "dim", 0, 2**40))
    return TensorEntry(
        name=str_field(obj, "name", 512, 1),
        dtype=dtype,
        shape=tuple(shape),
        offset=int_field(obj, "offset", 0, MAX_TOTAL_BYTES),
        nbytes=int_field(obj, "nbytes", 0, MAX_TOTAL_BYTES),
    )


def _chunk(item: Any) -> ChunkEntry:
    if not isinstance(item, (list, tuple)) or len(item) != 2:
        raise InvalidRecord("chunk entry must be [sha256, size]")
    obj = dict(zip(("sha256", "size"), item))
    return ChunkEntry(
        bytes_field(obj, "sha256", HASH_BYTES, exact=HASH_BYTES), int_field(obj, "size", 1, MAX_CHUNK_BYTES)
    )
