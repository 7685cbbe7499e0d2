"""Versioned weights between peers: a content-addressed local store that serves chunks, and a fetcher that
pulls a version from every holder at once.

Modules, one concept each:
- `layout`   how a state dict lies in one flat buffer, its chunks, O_DIRECT writes to disk
- `store`    `WeightStore`: versions on disk (publish, GC, partial fetches), buffers and state dicts
- `server`   `WeightServer`: the store's wire protocol (manifests, have-maps, chunks) on a P2P host
- `slots`    `SlotTable`: the server's streams, capped per peer and shared fairly among strangers
- `first_serve` `FirstServes`: a chunk just sent to one fetcher is "not yet" to the others for a moment
- `havemap`  have-maps: which chunks of a version a holder has, as bitmaps
- `schedule` `ChunkSchedule`: which chunk to ask which holder for next (rarest first)
- `fetch`    `WeightFetcher`: pull a version from many holders in parallel, verifying every chunk
"""

from swarmnode.swarm.weights.fetch import FetchStats, ProgressCallback, WeightFetcher, ping_holder
from swarmnode.swarm.weights.layout import (
    CHUNK_BYTES,
    ModelLayout,
    aligned_buffer,
    chunk_size_for,
    cut_chunks,
    flatten_into,
    plan_layout,
    tensors_from_buffer,
)
from swarmnode.swarm.weights.schedule import ChunkSchedule
from swarmnode.swarm.weights.server import WeightServer, protocol_name
from swarmnode.swarm.weights.store import FetchError, WeightStore

__all__ = [
    "CHUNK_BYTES",
    "ChunkSchedule",
    "FetchError",
    "FetchStats",
    "ModelLayout",
    "ProgressCallback",
    "WeightFetcher",
    "WeightServer",
    "WeightStore",
    "aligned_buffer",
    "chunk_size_for",
    "cut_chunks",
    "flatten_into",
    "plan_layout",
    "ping_holder",
    "protocol_name",
    "tensors_from_buffer",
]
