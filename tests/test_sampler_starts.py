"""Seeds make a run reproducible without making a restart repeat itself: a sampler's (and a learner's own
sampler's) seed comes from task.seed, its peer id and how many times it started in its data directory."""

from __future__ import annotations

import hashlib

import torch

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.node.roles.own_sampling import OwnSampler
from swarmnode.sampler.loop import sampler_seed
from swarmnode.sampler.starts import next_start
from swarmnode.tasks import build_task

torch.set_num_threads(1)


def test_start_counts_and_seeds(tmp_path):
    assert [next_start(tmp_path), next_start(tmp_path), next_start(tmp_path, "own")] == [0, 1, 0]
    (tmp_path / "sampler_starts").write_text("garbage")
    assert next_start(tmp_path) == 0 and next_start(tmp_path) == 1
    first = int.from_bytes(hashlib.sha256(b"7:peer").digest()[:4], "big")
    assert sampler_seed(7, "peer") == sampler_seed(7, "peer", 0) == first  # a first start: the seed it always had
    assert len({sampler_seed(7, "peer", 1), sampler_seed(7, "peer", 2), first, sampler_seed(8, "peer")}) == 4


def _own_first_prompts(data_dir, identity: Identity, seed: int) -> list[str]:
    cfg = load_config(
        "tiny-cpu",
        [
            "model.tiny.warm_start_steps=0",
            "sampler.prompts_per_batch=6",
            "sampler.max_completion_length=4",
            f"task.seed={seed}",
            f"data_dir={data_dir}",
        ],
    )
    task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
    learner = LearnerLoop(
        load_model(cfg.model, cfg.task, torch.device("cpu")), tokenizer, task, cfg, ReplayBuffer.from_config(cfg), None
    )
    out: list = []
    OwnSampler(learner, task, cfg, identity, out.append).batch()
    return [g.prompt_id for g in out]


def test_a_learners_own_sampler_honours_task_seed_and_a_restart_draws_anew(tmp_path):
    me = Identity.generate()
    first = _own_first_prompts(tmp_path / "a", me, 0)
    assert _own_first_prompts(tmp_path / "b", me, 0) == first  # reproducible: same seed, same start count
    assert _own_first_prompts(tmp_path / "a", me, 0) != first  # restarted in the same directory: new prompts
    assert _own_first_prompts(tmp_path / "c", me, 1) != first  # another task.seed: another stream
