"""SamplerLoop on the real tiny model: signed, valid groups with the engine's version; weights swapped between
batches; a failing transport does not stop generation."""

from __future__ import annotations

import threading

import pytest
import torch

from swarmnode.config import NodeConfig
from swarmnode.identity import Identity
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.tasks import build_task


@pytest.fixture(scope="module")
def cfg() -> NodeConfig:
    torch.set_num_threads(2)
    return NodeConfig.model_validate(
        {
            "run_id": "loop-test",
            "model": {"tiny": {"warm_start_steps": 0}},
            "sampler": {"num_generations": 4, "prompts_per_batch": 3, "max_completion_length": 6},
        }
    )


@pytest.fixture(scope="module")
def engine(cfg):
    return build_engine(cfg)


def test_step_builds_valid_signed_groups(cfg, engine):
    identity, sent = Identity.generate(), []
    task = build_task(cfg.task)
    loop = SamplerLoop(engine, task, cfg.sampler, cfg.run_id, identity, sent.append, lineage="L0", seed=cfg.task.seed)
    groups = loop.step()
    assert len(groups) == 3 and sent == groups and loop.groups_sent == 3
    limits = RolloutLimits.from_config(cfg, vocab_size=engine.model.config.vocab_size)
    for group in groups:
        decoded = RolloutGroup.decode(group.encode(), limits)
        assert decoded == group
        assert group.run_id == "loop-test" and group.lineage == "L0" and group.sampler_id == identity.peer_id
        assert group.policy_version == engine.version and len(group.completions) == 4
        prompt = task.get(group.prompt_id)  # a learner recovers the prompt and recomputes the rewards
        texts = engine.tokenizer.batch_decode(group.completions, skip_special_tokens=True)
        assert group.rewards == [task.reward(prompt, t) for t in texts]
        assert group.prompt_tokens == engine.tokenizer(prompt.text)["input_ids"]
    assert loop.last_mean_reward is not None


def test_offered_weights_are_swapped_in_between_batches(cfg, engine):
    old = {k: v.clone() for k, v in engine.model.state_dict().items()}
    loop = SamplerLoop(
        engine, build_task(cfg.task), cfg.sampler, cfg.run_id, Identity.generate(), lambda g: None, seed=cfg.task.seed
    )
    try:
        first = loop.step()
        assert {g.policy_version for g in first} == {0}
        new = {k: v + 0.01 for k, v in old.items()}
        loop.offer_weights(new, 4)
        loop.offer_weights(old, 2)  # older than what is pending: ignored
        assert engine.version == 0  # not loaded until the next batch
        second = loop.step()
        assert {g.policy_version for g in second} == {4} and engine.version == 4
        assert torch.equal(engine.model.model.norm.weight, new["model.norm.weight"])
        loop.offer_weights(old, 3)  # older than the engine's version: ignored
        assert {g.policy_version for g in loop.step()} == {4}
    finally:
        engine.load_state_dict(old, 0)


def test_offer_from_another_thread(cfg, engine):
    old = {k: v.clone() for k, v in engine.model.state_dict().items()}
    loop = SamplerLoop(
        engine, build_task(cfg.task), cfg.sampler, cfg.run_id, Identity.generate(), lambda g: None, seed=cfg.task.seed
    )
    try:
        offer = threading.Thread(target=loop.offer_weights, args=(old, 9))
        offer.start()
        offer.join(10)
        assert {g.policy_version for g in loop.step()} == {9}
    finally:
        engine.load_state_dict(old, 0)


def test_failing_send_is_counted_not_fatal(cfg, engine):
    def broken(group):
        raise ConnectionError("peer gone")

    loop = SamplerLoop(
        engine, build_task(cfg.task), cfg.sampler, cfg.run_id, Identity.generate(), broken, seed=cfg.task.seed
    )
    groups = loop.step()
    assert len(groups) == 3 and loop.send_errors == 3 and loop.groups_sent == 0


def test_the_same_version_from_another_learner_line_is_taken(cfg, engine):
    """A sampler holding the base model at version 0 is handed version 0 by a learner: its groups must name that
    learner's line from the next batch on (the learner's buffer refuses other lines)."""
    state = {k: v.clone() for k, v in engine.model.state_dict().items()}
    loop = SamplerLoop(
        engine, build_task(cfg.task), cfg.sampler, cfg.run_id, Identity.generate(), lambda g: None, seed=cfg.task.seed
    )
    assert engine.version == 0 and loop.lineage == ""
    loop.offer_weights(state, 0, lineage="L1")
    assert {g.lineage for g in loop.step()} == {"L1"} and engine.version == 0
