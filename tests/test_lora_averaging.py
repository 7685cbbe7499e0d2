"""LoRA with several learners (`learner.lora.enabled` and `learner.max_learners` > 1): the averaging averages the
adapter tensors only (the learner's trainable parameters), and after a round both learners publish the same
adapter-only version (same tensors, same base hash, same chunks). Real p2pd daemons and DHT nodes on 127.0.0.1,
two LoRA learner loops and their averagers in this process."""

from __future__ import annotations

import asyncio

import pytest
import torch
from learner_helpers import sampled_groups
from lora_helpers import LORA, cfg, parts, train_steps  # noqa: F401 (module fixtures)
from test_averaging import RUN, _close, _two_learners

from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.model.models import load_model
from swarmnode.swarm.averaging import LearnerAveraging
from swarmnode.swarm.weights import WeightStore

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes


def _lora_learner(cfg, parts, published: list) -> LearnerLoop:  # noqa: F811
    lc = cfg.learner.model_copy(update={"lora": cfg.learner.lora.model_copy(update=LORA), "max_learners": 2})
    c = cfg.model_copy(update={"learner": lc})
    task, tokenizer, _ = parts
    return LearnerLoop(
        load_model(c.model, c.task, "cpu"),
        tokenizer,
        task,
        c,
        ReplayBuffer.from_config(c),
        publish=lambda version, *payload: published.append((version, *payload)),
    )


async def _round(loops: list[LearnerLoop]) -> list:
    _, dhts = await _two_learners()
    averagers = [LearnerAveraging(loop.trainable, dht, RUN, group_size=2, timeout=30) for loop, dht in zip(loops, dhts)]
    try:
        for averager in averagers:
            await asyncio.to_thread(averager.start)
        return await asyncio.gather(*(asyncio.to_thread(a.round, loop.version) for a, loop in zip(averagers, loops)))
    finally:
        await _close(averagers, dhts)


@pytest.mark.timeout(300)
def test_two_lora_learners_average_adapters_only_and_publish_the_same_adapter_version(cfg, parts, tmp_path):  # noqa: F811
    published: list[list] = [[], []]
    loops = [_lora_learner(cfg, parts, out) for out in published]
    for loop in loops:
        loop.publish_current()  # version 0: the same adapters at both (seeded init), B = 0
    (v0a, a0, spec_a), (v0b, b0, spec_b) = published[0][0], published[1][0]
    assert v0a == v0b == 0 and spec_a == spec_b
    assert a0.keys() == b0.keys() and all(torch.equal(a0[k], b0[k]) for k in a0)

    frozen = {k: v.clone() for k, v in loops[0].model.state_dict().items() if "lora_" not in k}
    for loop in loops:  # local steps on different groups: the adapters drift apart
        train_steps(loop, sampled_groups(cfg, parts, 3))
    before = [loop.adapter_snapshot() for loop in loops]
    assert any(not torch.equal(before[0][k], before[1][k]) for k in before[0])
    assert all(len(loop.trainable) == len(before[0]) for loop in loops)  # what averages: the adapters, no more

    results = asyncio.run(_round(loops))
    assert [r.version for r in results] == [1, 1], [r.error for r in results]
    for loop, result in zip(loops, results):
        loop.adopt_version(result.version)
    (va, adapters_a, spec_a), (vb, adapters_b, spec_b) = published[0][-1], published[1][-1]
    assert va == vb == 1 and spec_a == spec_b  # same number, same base weights named
    assert all("lora_" in k for k in adapters_a)  # an adapter-only version
    assert adapters_a.keys() == adapters_b.keys() and all(torch.equal(adapters_a[k], adapters_b[k]) for k in adapters_a)
    for k in adapters_a:  # the mean of the two learners' adapters
        assert torch.allclose(adapters_a[k], (before[0][k] + before[1][k]) / 2, atol=1e-6)
    state = loops[0].model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in frozen.items())  # the base weights never moved

    stores = [WeightStore(tmp_path / name, cfg.run_id) for name in ("a", "b")]
    manifests = [
        store.publish(1, adapters, Identity.generate(), parent_version=0, model_id=cfg.model.name, adapter=spec)
        for store, (_, adapters, spec) in zip(stores, (published[0][-1], published[1][-1]))
    ]
    assert [c.sha256 for c in manifests[0].chunks] == [c.sha256 for c in manifests[1].chunks]


@pytest.mark.slow  # the local demo with two LoRA learners and two samplers as processes: ~30-60 s
@pytest.mark.timeout(600)
def test_demo_with_two_lora_learners_publishes_identical_adapter_versions(tmp_path):
    from demo_helpers import assert_no_node_left, run_demo

    from swarmnode.protocol.manifest import WeightManifest

    doc = run_demo(
        tmp_path,
        "--learners",
        "2",
        "--steps",
        "12",
        "--minutes",
        "5",
        "--set",
        "learner.lora.enabled=true",
        "--set",
        "learner.average_every=4",
        "--set",
        "learner.keep_versions=1000",
    )
    assert all(each["averaging_rounds"] >= 1 for each in doc["learners"].values()), doc["learners"]
    held = [
        {
            int(p.stem): WeightManifest.decode(p.read_bytes())
            for p in (tmp_path / "demo" / name / "weights" / "manifests").glob("*.bin")
        }
        for name in ("learner1", "learner2")
    ]
    shared = sorted(set(held[0]) & set(held[1]))
    assert len(shared) >= 2 and shared[0] == 0, shared  # version 0 and at least one averaged version
    for version in shared:
        a, b = held[0][version], held[1][version]
        assert a.kind == b.kind == "adapter" and a.adapter == b.adapter, version
        assert [c.sha256 for c in a.chunks] == [c.sha256 for c in b.chunks], version
    assert_no_node_left(doc)
