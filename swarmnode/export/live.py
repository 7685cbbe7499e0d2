"""A version fetched from a live run, the way a sampler fetches it: a throwaway client key joins the run's DHT,
finds the learners and the peers that hold weights (`swarm.follower.LivePeers`), and `WeightPuller` pulls the
version's chunks from every holder at once through `WeightFetcher`: the manifest must be signed by one of the
run's learner keys and fit the run's model (an adapter version must name the base weights held here), every chunk
is sha256-checked and a bad one asked of another holder. The chunks go to a temporary store beside the output
directory, removed afterwards."""

from __future__ import annotations

import asyncio
import functools
import shutil
import sys
from pathlib import Path

import torch

from swarmnode.config import NodeConfig
from swarmnode.errors import ExitCode
from swarmnode.export.errors import ExportError
from swarmnode.export.versions import Version, check_signer
from swarmnode.identity import Identity
from swarmnode.model.models import meta_state_dict
from swarmnode.observe.progress import fetch_progress
from swarmnode.protocol.manifest import AdapterSpec
from swarmnode.swarm.follower import LivePeers, WeightPuller
from swarmnode.swarm.membership import Membership
from swarmnode.swarm.p2p import SwarmStartError
from swarmnode.swarm.weights import FetchError, ModelLayout, WeightStore

LOOK_S = 20.0  # how long the client looks for a learner that announces a version


class _Keep:
    """The puller's sink: keeps the state it is offered."""

    state: dict[str, torch.Tensor] | None = None

    def offer_weights(
        self,
        state: dict[str, torch.Tensor],
        version: int,
        lineage: str | None = None,
        adapter: AdapterSpec | None = None,
    ) -> None:
        self.state = state


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


async def fetch_live(cfg: NodeConfig, version: int | None, store_dir: Path, base_hash: bytes | None) -> Version:
    """Version `version` (None: the newest a learner holds) of `cfg`'s run, fetched into a store at `store_dir`."""
    keys = list(cfg.trust.learner_keys)
    if not keys:
        raise ExportError(
            f"run {cfg.run_id} names no learner keys (trust.learner_keys): no version could be checked",
            exit_code=ExitCode.USAGE,
        )
    layout = ModelLayout.of(await asyncio.to_thread(meta_state_dict, cfg.model), base_hash=base_hash)
    member = Membership(cfg, Identity.generate(), "client", client_mode=True)
    try:
        await member.start()
    except SwarmStartError as exc:
        raise ExportError(f"run {cfg.run_id}: no bootstrap answered ({exc})", exit_code=ExitCode.NETWORK) from None
    assert member.dht is not None  # started
    store = WeightStore(store_dir, cfg.run_id, keep_versions=1)
    peers = LivePeers(member.dht, member.identity.peer_id, cfg.network.heartbeat_interval, designated=keys)
    sink = _Keep()
    puller = WeightPuller(
        member.dht.p2p,
        store,
        peers,
        sink,
        trusted=keys,
        emit=_say,
        layout=layout,
        progress=functools.partial(fetch_progress, emit=_say),
    )
    try:
        await peers.refresh()
        if version is None:
            found = await _newest(puller, peers)
        else:
            found = (version, {"publisher": None})
        try:
            await puller(*found)
        except FetchError as exc:
            holders = len(await peers.holders())
            if "does not hold version" in str(exc) and "learner keys" not in str(exc):
                raise ExportError(f"version {found[0]} is held by none of the run's {holders} live holders") from None
            raise
        manifest = store.manifest(found[0])
        if manifest is None or sink.state is None:
            raise ExportError(f"version {found[0]}: the fetch ended without it", exit_code=ExitCode.NETWORK)
        check_signer(manifest, cfg.run_id, keys, f"run {cfg.run_id}")
        state = {k: v.clone() for k, v in sink.state.items()}  # off the store's buffer, which is removed
        return Version(manifest, state, bytearray(), f"run {cfg.run_id} (live peers)")
    finally:
        await peers.close()
        await member.stop()


async def _newest(puller: WeightPuller, peers: LivePeers) -> tuple[int, dict]:
    """The newest version the run's learners hold (asked of them), else the newest announced in the DHT."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOOK_S
    while True:
        found = await puller.newest_from(await peers.learners())
        if found is None:
            found = await peers.dht.newest_version()
        if found is not None:
            return found
        if loop.time() > deadline:
            raise ExportError(f"no learner of run {peers.dht.cfg.run_id} announced a version within {LOOK_S:.0f} s")
        await asyncio.sleep(1.0)
        await peers.refresh()


def remove_store(store_dir: Path) -> None:
    shutil.rmtree(store_dir, ignore_errors=True)
