"""The LoRA learner parts the LoRA tests share: the tiny-cpu config at lr 1e-2 and its parts as module fixtures
(`cfg`, `parts`: task, tokenizer, engine), the adapter settings `LORA`, a LoRA learner loop and a few steps of it."""

from __future__ import annotations

import pytest
from learner_helpers import FAST

from swarmnode.config import load_config
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.sampler.build import build_engine
from swarmnode.tasks import build_task

LORA = dict(enabled=True, r=4, alpha=8.0)


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST + ["learner.learning_rate=1e-2"])


@pytest.fixture(scope="module")
def parts(cfg):
    return build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)


def lora_loop(cfg, parts, checkpoint_dir=None, lora=LORA, **learner):
    """A LoRA learner loop on a fresh tiny model (`lora`: the adapter settings, `learner`: other learner settings)."""
    lc = cfg.learner.model_copy(update={**learner, "lora": cfg.learner.lora.model_copy(update=lora)})
    c = cfg.model_copy(update={"learner": lc})
    task, tokenizer, _ = parts
    return LearnerLoop(
        load_model(c.model, c.task, "cpu"),
        tokenizer,
        task,
        c,
        ReplayBuffer.from_config(c),
        checkpoint_dir=checkpoint_dir,
    )


def train_steps(loop, groups, steps=3):
    """`steps` optimiser steps of two groups with a reward signal each."""
    rows = [r for g in groups if (r := loop.rows.rows(g, loop.version)) and len({x.reward for x in r}) > 1]
    for i in range(steps):
        loop._optimise(rows[i : i + 2])
        loop.step_count += 1
