"""A learner's versions into the swarm: write each into the weight store (signed manifest, content-addressed
chunks) and announce it in the run's DHT. The learner loop calls it from its publishing thread (or the training
thread); `newest` is what the learner's acks tell samplers to fetch (its training version may be ahead of it)."""

from __future__ import annotations

import asyncio

import torch

from swarmnode.identity import Identity
from swarmnode.protocol.manifest import AdapterSpec
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.weights import WeightStore


class VersionPublisher:
    """`publisher(version, state, adapter=None)`: the `publish` a `LearnerLoop` takes (`adapter`: `state` holds
    LoRA adapter tensors only). Safe from a worker thread: the DHT announcement is scheduled on `loop`, the
    node's event loop."""

    def __init__(
        self, store: WeightStore, dht: SwarmDHT, identity: Identity, model_id: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.store, self.dht, self.identity, self.model_id, self.loop = store, dht, identity, model_id, loop
        latest = store.latest()
        self.newest = latest if latest is not None else -1  # the newest version the store serves

    def __call__(self, version: int, state: dict[str, torch.Tensor], adapter: AdapterSpec | None = None) -> None:
        manifest = self.store.publish(
            version, state, self.identity, parent_version=version - 1, model_id=self.model_id, adapter=adapter
        )
        self.newest = max(self.newest, version)  # acks may tell it now: a sampler asking for it gets it
        pointer = {"publisher": self.identity.peer_id, "total_bytes": manifest.total_bytes}
        asyncio.run_coroutine_threadsafe(self.dht.announce_version(version, pointer), self.loop)
