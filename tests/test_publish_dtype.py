"""`learner.publish_dtype`: a float32 learner publishes its versions in bf16 (half the bytes) and keeps fp32 master
weights; a float32 sampler fetches such a version over real p2pd daemons and a real DHT (announced by the real
`VersionPublisher`, fetched by the real `WeightPuller`), loads it into its own float32 model and generates. LoRA
adapter versions in bf16 apply to a float32 base."""

from __future__ import annotations

import asyncio

import pytest
import torch
from learner_helpers import FAST, make_loop
from swarm_helpers import FAST_NET, LOOPBACK

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.model.models import load_tokenizer, meta_state_dict
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.follower import LivePeers, WeightPuller
from swarmnode.swarm.publisher import VersionPublisher
from swarmnode.swarm.weights import ModelLayout, WeightServer, WeightStore
from swarmnode.tasks import build_task

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

RUN = "publish-dtype"


def _cfg(*sets: str):
    return load_config("tiny-cpu", [*FAST, *FAST_NET, f"run_id={RUN}", f"network.host_maddrs=[{LOOPBACK}]", *sets])


def _parts(cfg):
    return build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), None


def _published(cfg, parts, store: WeightStore, identity: Identity, version: int, **learner):
    """A real tiny learner (`learner` overrides) publishing its weights as `version` into `store`; the learner."""
    loop = make_loop(cfg, parts, **learner)
    loop.publish = lambda v, state, adapter=None: store.publish(v, state, identity, adapter=adapter)
    loop.version = version
    loop.publish_current()  # what a learner does after a step
    return loop


def test_bf16_versions_are_half_the_bytes_and_a_float32_sampler_loads_and_generates(tmp_path):
    cfg = _cfg()
    assert cfg.model.dtype == "float32" and cfg.learner.publish_dtype == "model"
    parts = _parts(cfg)
    learner_id = Identity.generate()
    fp32 = WeightStore(tmp_path / "fp32", RUN)
    _published(cfg, parts, fp32, learner_id, 3)

    async def scenario():
        first = await SwarmDHT.create(cfg, learner_id)
        boot = str((await first.p2p.get_visible_maddrs())[0])
        second = await SwarmDHT.create(_cfg(f"network.initial_peers=[{boot}]"), Identity.generate())
        try:
            store = WeightStore(tmp_path / "learner", RUN)
            await WeightServer(store).start(first.p2p)
            loop = make_loop(cfg, parts, publish_dtype="bfloat16")
            loop.publish = VersionPublisher(store, first, learner_id, cfg.model.name, asyncio.get_running_loop())
            loop.version = 3
            await asyncio.to_thread(loop.publish_current)  # from the step thread, as a learner node does

            engine = build_engine(cfg)  # a float32 sampler
            groups: list = []
            sampler = SamplerLoop(engine, parts[0], cfg.sampler, cfg.run_id, Identity.generate(), groups.append, seed=1)
            puller = WeightPuller(
                second.p2p,
                WeightStore(tmp_path / "sampler", RUN),
                LivePeers(second, second.identity.peer_id, 1.0, designated=[learner_id.peer_id]),
                sampler,
                trusted=[learner_id.peer_id],
                layout=ModelLayout.of(meta_state_dict(cfg.model), base_hash=engine.base_hash),
                emit=lambda line: None,
            )
            for _ in range(100):  # until the announcement is seen from the sampler's DHT node
                if (found := await second.newest_version()) is not None:
                    break
                await asyncio.sleep(0.1)
            assert found is not None and found[0] == 3
            await puller(*found)
            await asyncio.to_thread(sampler.step)
            return loop, store, engine, groups, puller.last_stats
        finally:
            await second.shutdown()
            await first.shutdown()

    loop, store, engine, groups, stats = asyncio.run(scenario())
    assert all(p.dtype == torch.float32 for p in loop.model.parameters())  # fp32 master weights
    full, half = fp32.manifest(3), store.manifest(3)
    assert {t.dtype for t in full.tensors} == {"float32"} and {t.dtype for t in half.tensors} == {"bfloat16"}
    assert half.total_bytes * 2 == full.total_bytes, (half.total_bytes, full.total_bytes)
    assert stats is not None and stats.fetched_bytes == half.total_bytes
    published = store.state_dict(3)  # the chunks (and their digests) are of the bf16 bytes
    for name, tensor in loop.model.state_dict().items():
        assert torch.equal(published[name], tensor.to(torch.bfloat16)), name
    assert engine.version == 3 and groups and all(g.policy_version == 3 for g in groups)
    own = engine.model.state_dict()  # the sampler's own float32 model, holding the bf16 values
    for name, tensor in published.items():
        assert own[name].dtype == torch.float32 and torch.equal(own[name], tensor.float()), name


def test_bf16_adapter_versions_apply_to_a_float32_base(tmp_path):
    lora = ["learner.lora.enabled=true", "learner.lora.r=4", "learner.lora.alpha=8", "learner.learning_rate=1e-4"]
    cfg = _cfg(*lora, "learner.publish_dtype=bfloat16")
    parts = _parts(cfg)
    store = WeightStore(tmp_path / "learner", RUN)
    loop = make_loop(cfg, parts)
    for p in loop.trainable:  # trained adapters (lora_B starts at zero)
        p.data.normal_(0, 0.05)
    loop.publish = lambda v, state, adapter=None: store.publish(v, state, Identity.generate(), adapter=adapter)
    loop.version = 1
    loop.publish_current()
    manifest = store.manifest(1)
    assert manifest.adapter is not None and {t.dtype for t in manifest.tensors} == {"bfloat16"}
    engine = build_engine(cfg)  # a float32 base
    ModelLayout.of(meta_state_dict(cfg.model), base_hash=engine.base_hash).check(manifest)  # the fetcher's check
    sampler = SamplerLoop(engine, parts[0], cfg.sampler, cfg.run_id, Identity.generate(), lambda group: None, seed=2)
    sampler.offer_weights(store.state_dict(1), 1, adapter=manifest.adapter)
    groups = sampler.step()
    assert engine.version == 1 and groups and all(g.policy_version == 1 for g in groups)
