"""The tiny-cpu learner parts the learner tests share: a fast config (`FAST`), the config and its parts as
module fixtures (`cfg`, `parts`: task, tokenizer, engine), sampled groups and a `LearnerLoop` over them."""

from __future__ import annotations

import os

import pytest
import torch
from group_helpers import copy_of  # noqa: F401  (re-exported: the tests import it from here)

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.tasks import build_task

torch.set_num_threads(1)
FAST = [
    "model.tiny.warm_start_steps=0",
    "sampler.device=cpu",
    "learner.device=cpu",
    "sampler.prompts_per_batch=4",
    "learner.prompts_per_step=4",
    "sampler.max_completion_length=6",
]


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST)


@pytest.fixture(scope="module")
def parts(cfg):
    task = build_task(cfg.task)
    return task, load_tokenizer(cfg.model, cfg.task), build_engine(cfg)


def sampled_groups(cfg, parts, n_batches=2, version=0):
    task, _, engine = parts
    out: list[RolloutGroup] = []
    engine.version = version
    sampler = SamplerLoop(
        engine, task, cfg.sampler, cfg.run_id, Identity.generate(), out.append, seed=len(os.urandom(1))
    )
    for _ in range(n_batches):
        sampler.step()
    return out


def make_loop(cfg, parts, tmp_path=None, published=None, **overrides):
    task, tokenizer, _ = parts
    c = cfg.model_copy(update={"learner": cfg.learner.model_copy(update=overrides)})
    model = load_model(c.model, c.task, "cpu")
    buffer = ReplayBuffer.from_config(c)
    publish = (lambda v, s: published.append((v, s))) if published is not None else None
    return LearnerLoop(model, tokenizer, task, c, buffer, publish, tmp_path)


def signal_groups(cfg, parts, n: int) -> list[RolloutGroup]:
    """`n` sampled groups whose recomputed rewards differ within the group (so each one trains)."""
    task, tokenizer, engine = parts
    out: list[RolloutGroup] = []
    sampler = SamplerLoop(engine, task, cfg.sampler, cfg.run_id, Identity.generate(), out.append, seed=1)
    for _ in range(50):
        if len([g for g in out if _has_signal(task, tokenizer, g)]) >= n:
            break
        sampler.step()
    found = [g for g in out if _has_signal(task, tokenizer, g)][:n]
    assert len(found) == n, "the untrained tiny model should give some groups a reward signal"
    return found


def _has_signal(task, tokenizer, group) -> bool:
    prompt = task.get(group.prompt_id)
    texts = tokenizer.batch_decode(group.completions, skip_special_tokens=True)
    return len({task.reward(prompt, t) for t in texts}) > 1
