"""The tiny-cpu learner parts at sampling temperature 1.3 (completions of unequal lengths, so micro-batches of
unequal sizes), as module fixtures (`cfg`, `parts`: task, tokenizer, engine) for the micro-batch and step tests."""

from __future__ import annotations

import pytest
from learner_helpers import FAST

from swarmnode.config import load_config
from swarmnode.model.models import load_tokenizer
from swarmnode.sampler.build import build_engine
from swarmnode.tasks import build_task


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST + ["sampler.temperature=1.3"])


@pytest.fixture(scope="module")
def parts(cfg):
    return build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)
