"""Every sampler of a run draws its own prompts and samples: seeded from (task seed, peer id). In one process, the
transformers engine's seed decides its samples and leaves the global RNG alone; in a real local swarm (bootstrap,
learner and two sampler processes on 127.0.0.1, one config) the two samplers' groups, read back from the
learner's group journal, have different prompt sequences and different completions for one prompt."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
import torch
from restart_helpers import WORK, learner_args
from swarm_helpers import LocalSwarm

from swarmnode.config import NodeConfig, load_config
from swarmnode.learner.journal import _records
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.node.roles.learner_role import JOURNAL_FILE
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits
from swarmnode.sampler.engines import HFEngine
from swarmnode.sampler.loop import sampler_seed

PROMPTS = ["3+5=", "1+1="]


@pytest.fixture(scope="module")
def parts():
    torch.set_num_threads(2)
    cfg = NodeConfig.model_validate({"model": {"tiny": {"warm_start_steps": 0}}})
    return load_model(cfg.model, cfg.task), load_tokenizer(cfg.model, cfg.task)


def _completions(engine: HFEngine) -> list[list[list[int]]]:
    return [g.completions for g in engine.generate(PROMPTS, 8, 1.0, 8)]


def test_the_seed_decides_the_samples_and_leaves_the_global_rng_alone(parts):
    model, tokenizer = parts
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b, c = (
        HFEngine(model, tokenizer, seed=s)
        for s in (sampler_seed(0, "peerA"), sampler_seed(0, "peerA"), sampler_seed(0, "peerB"))
    )
    first_a, first_b, first_c = _completions(a), _completions(b), _completions(c)
    assert first_a == first_b  # one seed, one sample
    assert first_a != first_c  # another peer, another sample
    assert _completions(a) != first_a  # the next batch of one engine is a new draw
    assert torch.equal(torch.get_rng_state(), before)


def test_sampler_seed_depends_on_task_seed_and_peer():
    assert sampler_seed(0, "p") == sampler_seed(0, "p")
    assert len({sampler_seed(0, "p"), sampler_seed(1, "p"), sampler_seed(0, "q")}) == 3


def _journal_groups(path, cfg) -> list[RolloutGroup]:
    limits = RolloutLimits.from_config(cfg, vocab_size=len(load_tokenizer(cfg.model, cfg.task)))
    data = path.read_bytes() if path.exists() else b""
    return [RolloutGroup.decode(body, limits) for body, _ in _records(data)]


@pytest.mark.slow  # ~20-40 s quiet: CI's long-scenario step runs it (.ci/run); the suite's 10-minute budget
@pytest.mark.usefixtures("starts_processes")
def test_two_sampler_processes_of_one_run_draw_different_prompts_and_samples(tmp_path):
    # the learner never trains (a step needs more groups than it may hold): every group stays in its journal,
    # at version 0, so both samplers generate with the same weights
    hold = [
        "--set",
        "learner.prompts_per_step=256",
        "--set",
        "learner.buffer_size=256",
        "--set",
        "learner.per_sampler_quota=1.0",
    ]
    cfg = load_config("tiny-cpu", ["model.tiny.warm_start_steps=20"])
    journal = tmp_path / "learner" / JOURNAL_FILE
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        learner = swarm.join("learner", "learner", wait=False, **learner_args(tmp_path, *hold))
        learner.ready_fields(timeout=180)
        samplers = [
            swarm.join(
                f"s{i}", "sampler", work=True, wait=False, extra=[*WORK, "--set", f"data_dir={tmp_path / f's{i}'}"]
            )
            for i in (1, 2)
        ]
        for s in samplers:
            s.ready_fields(timeout=180)
        deadline = time.monotonic() + 240
        while True:
            by_sampler: dict[str, list[RolloutGroup]] = defaultdict(list)
            for group in _journal_groups(journal, cfg):
                by_sampler[group.sampler_id].append(group)
            if len(by_sampler) == 2 and min(len(g) for g in by_sampler.values()) >= 24:
                break
            assert time.monotonic() < deadline, {k: len(v) for k, v in by_sampler.items()}
            time.sleep(1.0)
    first, second = (groups[:24] for groups in by_sampler.values())
    assert {g.policy_version for g in first + second} == {0}
    assert [g.prompt_id for g in first] != [g.prompt_id for g in second]
    # a prompt both drew: its completions differ (the same seed would have given the very same ones)
    shared = sorted({g.prompt_id for g in first} & {g.prompt_id for g in second})
    assert shared, "no prompt drawn by both samplers"
    pid = shared[0]
    one = next(g for g in first if g.prompt_id == pid)
    other = next(g for g in second if g.prompt_id == pid)
    assert sorted(one.completions) != sorted(other.completions)
