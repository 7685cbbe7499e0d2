"""Shared by the weight-plane tests: a small mixed-dtype state, stores with small chunks, real p2pd daemons."""

from __future__ import annotations

import contextlib

import torch
from hivemind.p2p import P2P

from swarmnode.swarm.weights import WeightStore

RUN = "test-run"
CHUNK = 64 << 10


def make_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """~1.3 MB of mixed-dtype tensors (about 20 chunks of 64 KiB)."""
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(256, 512, generator=g),
        "layer.0.w": torch.randn(256, 256, generator=g).to(torch.bfloat16),
        "layer.0.norm": torch.ones(512),
        "layer.1.w": torch.randn(128, 512, generator=g),
        "step": torch.tensor([7], dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 4),
    }


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k], b[k]), k


@contextlib.asynccontextmanager
async def daemons(n: int):
    """`n` real p2pd daemons on loopback that can reach each other; always shut down."""
    kw = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False)
    peers: list[P2P] = []
    try:
        peers.append(await P2P.create(**kw))
        maddrs = await peers[0].get_visible_maddrs()
        for _ in range(n - 1):
            peers.append(await P2P.create(initial_peers=maddrs, **kw))
        yield peers
    finally:
        for p in peers:
            with contextlib.suppress(Exception):
                await p.shutdown()


def store(tmp_path, name: str, **kw) -> WeightStore:
    return WeightStore(tmp_path / name, RUN, chunk_bytes=CHUNK, **kw)
