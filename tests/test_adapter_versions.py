"""Adapter-only weight versions: the manifest names the base weights by content hash; a sampler's engine applies
a LoRA learner's adapters and then reports the learner's log-probs (fp32, <= 1e-5 per token); a version for other
base weights is refused before any chunk is fetched (the manifest check, over real p2pd daemons) and by the engine
(the sampler keeps its weights)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest
import torch
from learner_helpers import sampled_groups
from lora_helpers import cfg, lora_loop, parts, train_steps  # noqa: F401  (fixtures: the tiny model at lr 1e-2)
from weights_helpers import assert_same, daemons, store

from swarmnode.identity import Identity
from swarmnode.model.adapters import weights_hash
from swarmnode.model.logprobs import behaviour_mismatch
from swarmnode.model.models import load_model, meta_state_dict
from swarmnode.protocol.codec import InvalidRecord, unpack
from swarmnode.protocol.manifest import WeightManifest
from swarmnode.sampler.engines import EngineError, HFEngine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.swarm.weights import FetchError, ModelLayout, WeightFetcher, WeightServer, WeightStore

PROMPTS = ["3+5=", "12+13=", "7+0=", "40+2="]
G, MAX_NEW = 4, 6


@pytest.fixture(scope="module")
def trained(cfg, parts):
    """A LoRA learner after three steps: (loop, its adapter tensors, their spec)."""
    loop = lora_loop(cfg, parts)
    train_steps(loop, sampled_groups(cfg, parts, 3))
    return loop, loop.adapter_snapshot(), loop.adapter_spec


def _engine(cfg, parts) -> HFEngine:
    return HFEngine(load_model(cfg.model, cfg.task, "cpu"), parts[1])


def test_base_hash_names_the_weights_not_the_object(cfg):
    a, b = load_model(cfg.model, cfg.task), load_model(cfg.model, cfg.task)
    assert weights_hash(a.state_dict()) == weights_hash(b.state_dict())
    with torch.no_grad():
        b.model.layers[0].mlp.up_proj.weight[0, 0] += 1e-3
    assert weights_hash(a.state_dict()) != weights_hash(b.state_dict())


def test_adapter_version_is_adapter_only_and_signed(cfg, parts, trained, tmp_path):
    loop, adapters, spec = trained
    assert spec.base_hash == weights_hash(load_model(cfg.model, cfg.task).state_dict())
    assert (spec.r, spec.alpha, set(spec.target_modules)) == (4, 8.0, set(cfg.learner.lora.target_modules))
    held, me = WeightStore(tmp_path / "w", cfg.run_id), Identity.generate()
    full = held.publish(1, loop.state_snapshot(), me)
    adapter = held.publish(2, adapters, me, parent_version=1, adapter=spec)
    decoded = WeightManifest.decode(adapter.encode())
    assert (decoded.kind, decoded.adapter, full.kind) == ("adapter", spec, "full")
    assert all("lora_" in t.name for t in decoded.tensors)
    assert adapter.total_bytes < full.total_bytes / 5  # r=4 on the tiny model; Qwen3-0.6B at r=16: bench/learner-memory
    assert "adapter" not in unpack(full.encode(), 1 << 20)  # full-weight manifests are signed as before
    forged = WeightManifest.decode(adapter.encode())
    forged.adapter = replace(spec, alpha=spec.alpha * 2)
    with pytest.raises(InvalidRecord, match="signature"):
        WeightManifest.decode(forged.encode())  # the spec is covered by the signature


def test_engine_applies_adapters_and_reports_the_learners_logprobs(cfg, parts, trained):
    loop, adapters, spec = trained
    engine = _engine(cfg, parts)
    assert engine.base_hash == spec.base_hash
    torch.manual_seed(0)
    before = engine.generate(PROMPTS, G, 1.0, MAX_NEW)
    engine.load_adapter(adapters, spec, version=3)
    assert engine.version == 3
    changed = behaviour_mismatch(loop.model, before, 1.0, engine.tokenizer.pad_token_id)[0]
    assert changed > 1e-3  # the base's log-probs are not the adapted policy's
    for temperature in (1.0, 0.7):
        after = engine.generate(PROMPTS, G, temperature, MAX_NEW)
        mean, worst = behaviour_mismatch(loop.model, after, temperature, engine.tokenizer.pad_token_id)
        assert worst <= 1e-5, (temperature, mean, worst)  # the behaviour gap per token, fp32
    zero = {k: torch.zeros_like(v) for k, v in adapters.items()}  # a later version replaces the tensors
    engine.load_adapter(zero, spec, version=4)
    base = load_model(cfg.model, cfg.task)
    again = engine.generate(PROMPTS, G, 1.0, MAX_NEW)
    assert behaviour_mismatch(base, again, 1.0, engine.tokenizer.pad_token_id)[1] <= 1e-5
    engine.load_state_dict(base.state_dict(), version=5)  # a full-weight version takes the layers out
    assert set(engine.model.state_dict()) == set(base.state_dict())
    with pytest.raises(EngineError, match="refused"):  # and leaves no base to apply adapters to
        engine.load_adapter(adapters, spec, version=6)


def test_sampler_refuses_an_adapter_for_other_base_weights(cfg, parts, trained, caplog):
    loop, adapters, spec = trained
    other = replace(spec, base_hash=bytes(32))
    layout = ModelLayout.of(meta_state_dict(cfg.model), base_hash=spec.base_hash)
    manifest = WeightManifest.create(
        identity=Identity.generate(),
        run_id=cfg.run_id,
        version=1,
        parent_version=0,
        model_id="tiny",
        tensors=[],
        chunks=[],
        adapter=other,
    )
    with pytest.raises(InvalidRecord, match="refused"):
        layout.check(manifest)  # the fetcher's check: nothing is downloaded
    engine = _engine(cfg, parts)
    weights = {k: v.clone() for k, v in engine.model.state_dict().items()}
    sampler = SamplerLoop(
        engine, parts[0], cfg.sampler, cfg.run_id, Identity.generate(), lambda group: None, seed=cfg.task.seed
    )
    sampler.offer_weights(adapters, 1, adapter=other)
    with caplog.at_level(logging.ERROR, logger="swarmnode.sampler.loop"):
        groups = sampler.step()  # no crash: the batch is made with the weights held
    assert "version 1 not applied" in caplog.text and "refused" in caplog.text
    assert engine.version == 0 and all(g.policy_version == 0 for g in groups)
    assert all(torch.equal(v, weights[k]) for k, v in engine.model.state_dict().items())
    sampler.offer_weights(adapters, 2, adapter=spec)  # the right base: applied
    sampler.step()
    assert engine.version == 2


def test_layout_checks_adapter_tensors_against_the_model(cfg, trained):
    loop, adapters, spec = trained
    layout = ModelLayout.of(meta_state_dict(cfg.model), base_hash=spec.base_hash)
    me = Identity.generate()

    def manifest(state):
        from swarmnode.swarm.weights.layout import aligned_buffer, cut_chunks, flatten_into, plan_layout

        tensors, total = plan_layout(state)
        buf = aligned_buffer(total)
        flatten_into(state, tensors, buf)
        return WeightManifest.create(
            identity=me,
            run_id=cfg.run_id,
            version=1,
            parent_version=0,
            model_id="tiny",
            tensors=tensors,
            chunks=cut_chunks(buf, 1 << 20),
            adapter=spec,
        )

    layout.check(manifest(adapters))
    name = next(k for k in adapters if "lora_A" in k)
    bad = {**adapters, name: torch.zeros(adapters[name].shape[0] + 1, adapters[name].shape[1])}
    with pytest.raises(InvalidRecord, match="expected"):
        layout.check(manifest(bad))
    with pytest.raises(InvalidRecord, match="only one of"):
        layout.check(manifest({k: v for k, v in adapters.items() if k != name}))
    with pytest.raises(InvalidRecord, match="not a LoRA"):
        layout.check(manifest({**adapters, "model.norm.weight": torch.zeros(4)}))


@pytest.mark.usefixtures("starts_processes")
def test_fetch_of_an_adapter_for_other_base_weights_is_refused_before_any_chunk(cfg, trained, tmp_path):
    """Real p2pd daemons: the manifest check refuses the version, nothing is allocated or kept; the right base
    fetches it."""
    _, adapters, spec = trained
    learner = Identity.generate()
    meta = meta_state_dict(cfg.model)

    async def scenario():
        async with daemons(2) as (lp, sp):
            published = store(tmp_path, "learner")
            await WeightServer(published).start(lp)
            published.publish(1, adapters, learner, adapter=spec)
            other = store(tmp_path, "other")
            refusing = WeightFetcher(sp, other, [learner.peer_id], layout=ModelLayout.of(meta, bytes(32)))
            with pytest.raises(FetchError, match="refused"):
                await refusing.fetch([lp.peer_id], 1)
            assert other.versions() == [] and other.partial_versions() == [] and refusing.rejected_manifests == 1
            same = store(tmp_path, "same")
            await WeightFetcher(sp, same, [learner.peer_id], layout=ModelLayout.of(meta, spec.base_hash)).fetch(
                [lp.peer_id], 1
            )
            assert same.manifest(1).adapter == spec
            assert_same(same.state_dict(1), adapters)

    asyncio.run(scenario())
