"""`learner.sample_when_idle`: a learner short of groups makes its own batch with the weights it trains, instead of
waiting. In process (`OwnSampler` on a real `LearnerLoop` and the tiny model) and as a real learner node on
127.0.0.1 with no sampler at all: it trains alone, on-policy, and is never idle."""

from __future__ import annotations

import pytest
import torch
from restart_helpers import WORK, wait_for
from swarm_helpers import LocalSwarm, assert_ready_after

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer, RolloutInbox
from swarmnode.learner.loop import LearnerLoop
from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.local.demo import read_steps
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.node.roles.own_sampling import OwnSampler
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.tasks import build_task

torch.set_num_threads(1)
FAST = [
    "model.tiny.warm_start_steps=0",
    "sampler.prompts_per_batch=4",
    "learner.prompts_per_step=4",
    "sampler.max_completion_length=6",
    "learner.publish_every=1",
]


def test_own_batches_are_on_policy_signed_and_leave_the_model_training():
    cfg = load_config("tiny-cpu", FAST)
    task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
    model = load_model(cfg.model, cfg.task, torch.device("cpu"))
    me = Identity.generate()
    buffer = ReplayBuffer.from_config(cfg, lineage=me.peer_id)  # a lone learner's buffer: its own line only
    learner = LearnerLoop(model, tokenizer, task, cfg, buffer, None)
    inbox = RolloutInbox(buffer)
    own = OwnSampler(learner, task, cfg, me, inbox.send)
    assert learner.model.training

    versions, batches = [], 0
    while len(versions) < 3 and batches < 12:  # a batch whose groups all score alike trains nothing: go on
        assert learner.step() is None  # nothing buffered: no step
        assert own.batch() == 4 and len(buffer) == 4  # every group accepted (lineage, version, signature)
        batches += 1
        assert learner.model.training
        diag = learner.step()
        assert diag is not None and diag["staleness_max"] == 0  # made with the weights being trained
        if diag.get("trained"):
            versions.append(learner.version)
    assert versions == [1, 2, 3] and own.groups == 4 * batches
    # its prompts are its own stream, not a sampler's (seeded by task.seed): the first batches differ
    sampler_first: list = []
    SamplerLoop(
        own.engine, task, cfg.sampler, cfg.run_id, Identity.generate(), sampler_first.append, seed=cfg.task.seed
    ).step()
    own_first: list = []
    OwnSampler(learner, task, cfg, me, own_first.append).batch()
    assert [g.prompt_id for g in own_first] != [g.prompt_id for g in sampler_first]


@pytest.mark.timeout(240)
@pytest.mark.usefixtures("starts_processes")
def test_a_learner_alone_trains_on_its_own_batches(tmp_path):
    learner_dir = tmp_path / "learner"
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        learner = swarm.join(
            "learner",
            "learner",
            work=True,
            extra=[*WORK, "--set", f"data_dir={learner_dir}", "--set", "learner.sample_when_idle=true"],
        )
        assert_ready_after(learner.stdout(), "loading the model...", "learner ready: version 0")
        output = learner.stdout() + learner.stderr()  # a quiet start: no housekeeping, no progress bars
        for noise in ("stale p2pd sockets", "was not stored by any DHT peer", "Loading weights", "it/s]"):
            assert noise not in output, (noise, output[-2000:])
        rows = wait_for(
            lambda: len(r := read_steps(learner_dir / STEPS_FILE)) >= 5 and r,
            180,
            "5 learner steps with no sampler",
            lambda: learner.stderr()[-2000:],
        )
    last = rows[-1]
    assert last["groups_received"] == 0  # nobody sent any
    assert last["groups_self_made"] >= 5 * 8  # 8 groups a step (tiny-cpu): all its own
    assert last["idle_seconds"] == 0.0  # it never waited
    assert all(r["staleness_max"] == 0 for r in rows)  # on-policy: made with the weights it trains
