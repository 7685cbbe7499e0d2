"""A version's tensors read from a weight store on disk (a learner's data directory, or a fetch's store), with the
checks a sampler makes: a manifest signed by one of the run's learner keys (its signature is verified when it is
read) for this run, every chunk's sha256. Reading leaves the store's caches alone, so a running learner's store
can be read beside it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from swarmnode.errors import ExitCode
from swarmnode.export.errors import ExportError
from swarmnode.protocol.manifest import WeightManifest
from swarmnode.quiet_log import quiet_logger
from swarmnode.swarm.weights import WeightStore, aligned_buffer, tensors_from_buffer
from swarmnode.swarm.weights.layout import Buffer

STORE_DIR = "weights"  # a node's weight store, under its data directory


@dataclass
class Version:
    """One version's tensors (views of `buffer`), its verified manifest and where it came from."""

    manifest: WeightManifest
    state: dict[str, torch.Tensor]
    buffer: Buffer
    source: str  # "data dir <path>" or "run <id> (<n> holders)"


def pick_version(held: list[int], version: int | None, where: str) -> int:
    """`version` if held, the newest held when None; ExportError (exit 3) naming what is held otherwise."""
    if not held:
        raise ExportError(f"{where} holds no complete weight version")
    if version is None:
        return held[-1]
    if version not in held:
        raise ExportError(f"version {version} is not held in {where} (held: {', '.join(map(str, held))})")
    return version


def check_signer(manifest: WeightManifest, run_id: str, keys: Iterable[str], where: str) -> None:
    """ExportError unless `manifest` is this run's and signed by one of `keys` (any key when the run names none)."""
    keys = list(keys)
    if manifest.run_id != run_id:
        raise ExportError(f"version {manifest.version} in {where} is run {manifest.run_id!r}'s, not {run_id!r}")
    if keys and manifest.publisher not in keys:
        raise ExportError(
            f"version {manifest.version} in {where} is signed by {manifest.publisher}, not one of the run's "
            f"learner keys ({', '.join(k[-8:] for k in keys)}): refused",
            exit_code=ExitCode.USAGE,
        )


def read_version(store: WeightStore, version: int, where: str) -> Version:
    """The tensors of a complete version held in `store`, every chunk hash-checked; ExportError when a chunk is
    missing or corrupt."""
    manifest = store.manifest(version)
    if manifest is None:
        raise ExportError(f"version {version} is not held in {where} (or its manifest's signature does not verify)")
    buf = aligned_buffer(manifest.total_bytes)
    view = memoryview(buf)
    for chunk, off in zip(manifest.chunks, manifest.chunk_offsets()):
        with quiet_logger(
            "swarmnode.swarm.weights.store"
        ):  # the store's own warning would be a second line: the error below says it
            held = store.load_chunk_into(chunk, view[off : off + chunk.size])
        if not held:
            raise ExportError(
                f"version {version} in {where}: chunk {chunk.hex[:12]} is missing or corrupt (its sha256 does not "
                "match the signed manifest); export another version (--version) or from the live run (its invite)"
            )
    return Version(manifest, tensors_from_buffer(manifest, buf), buf, where)


def local_version(data_dir: Path, run_id: str, keys: Iterable[str], version: int | None) -> Version:
    """Version `version` (None: the newest) of the learner whose data directory is `data_dir`."""
    root = Path(data_dir) / STORE_DIR
    where = f"{data_dir}"
    if not (root / "manifests").is_dir():
        raise ExportError(f"{data_dir} is not a node's data directory (no {STORE_DIR}/manifests in it)")
    store = WeightStore(root, run_id)
    chosen = pick_version(store.versions(), version, where)
    found = read_version(store, chosen, where)
    check_signer(found.manifest, run_id, keys, where)
    return found
