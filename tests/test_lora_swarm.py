"""A LoRA learner and a sampler in a real local swarm (bootstrap, learner and sampler processes on 127.0.0.1):
every version published is adapter-only and a fraction of the full weights' bytes; the sampler applies each
one, and the learner's spot checks of every group (tolerance 1e-5 nats per token, fp32) pass; the adapters
change the policy's log-probs; a restarted learner resumes its adapters and its learning-rate schedule (slow:
a second learner start)."""

from __future__ import annotations

import re

import pytest
import torch
from restart_helpers import WORK, learner_args, steps, wait_rows
from swarm_helpers import LocalSwarm

from swarmnode.config import load_config
from swarmnode.learner.checkpoint import load_checkpoint
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.models import load_model, meta_state_dict
from swarmnode.sampler.lora import PeftAdapter
from swarmnode.swarm.weights import ModelLayout, WeightStore

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

LORA = [
    "learner.lora.enabled=true",
    "learner.lora.r=4",
    "learner.lora.alpha=8",
    "learner.learning_rate=1e-2",
    "learner.warmup_steps=100",
    "trust.verify_fraction=1.0",
    "trust.verify_tolerance=1e-5",
    "learner.keep_versions=100",
]


def _newest_group_version(row: dict) -> int:
    """The newest policy version among a step's groups (the version is the step's, after its publish)."""
    return row["version"] - 1 - int(row.get("staleness_min", row["version"]))


def _sets(*sets: str) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


@pytest.mark.slow  # ~20-40 s quiet: CI's long-scenario step runs it (.ci/run); the suite's 10-minute budget
def test_lora_learner_publishes_adapter_versions_the_sampler_applies(tmp_path):
    run_lora_swarm(tmp_path, restart=False)


@pytest.mark.slow  # a second learner start: minutes on a loaded 2-core machine
def test_restarted_lora_learner_resumes_adapters_and_schedule(tmp_path):
    run_lora_swarm(tmp_path, restart=True)


def run_lora_swarm(tmp_path, restart: bool) -> None:
    """The scenario of the module docstring, the learner's restart only with `restart`."""
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    cfg = load_config("tiny-cpu", ["model.tiny.warm_start_steps=20", *LORA])
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        learner = swarm.join("learner", "learner", wait=False, **learner_args(tmp_path, *_sets(*LORA)))
        learner.ready_fields(timeout=180)  # generous: a loaded 2-core machine starts nodes slowly
        sampler = swarm.join(
            "sampler", "sampler", work=True, wait=False, extra=[*WORK, "--set", f"data_dir={tmp_path / 'sampler'}"]
        )
        sampler.ready_fields(timeout=180)
        before = 8 if restart else 4  # steps before the learner stops (the restart check wants trained adapters)
        rows = wait_rows(
            steps_file,
            lambda r: (
                len(r) >= before and r[-1]["verified_groups"] >= 8 and any(_newest_group_version(x) >= 2 for x in r)
            ),
            240,
            f"{before} learner steps, 8 spot-checked groups, groups made with adapter version >= 2",
        )
        assert sampler.popen.poll() is None and "not applied" not in sampler.stderr(), sampler.stderr()[-2000:]
        assert learner.stop(timeout=120) == 0, learner.stderr()[-2000:]  # SIGTERM: checkpoint, leave
        rows = steps(steps_file)
        # every group was checked against the learner's weights of its version (the sampler's groups of adapter
        # versions too: it applied them), none differed by more than 1e-5 nats per token
        assert all(r.get("rejected_logprob_mismatch", 0) == 0 for r in rows), rows[-1]
        store = WeightStore(tmp_path / "learner" / "weights", swarm.run_id)
        full_bytes = ModelLayout.of(meta_state_dict(cfg.model)).total_bytes
        manifests = [store.manifest(v) for v in store.versions()]
        assert len(manifests) >= 3 and all(m.kind == "adapter" for m in manifests)
        assert all(m.total_bytes < full_bytes / 5 for m in manifests), (manifests[-1].total_bytes, full_bytes)
        fetched = WeightStore(tmp_path / "sampler" / "weights", swarm.run_id)
        assert max(fetched.versions()) >= 2 and all(fetched.manifest(v).kind == "adapter" for v in fetched.versions())

        newest = manifests[-1]  # the adapters change what the sampler computes
        base = load_model(cfg.model, cfg.task)
        adapted = load_model(cfg.model, cfg.task)
        PeftAdapter(adapted, newest.adapter).load(store.state_dict(newest.version))
        prompt, completion = [[5, 6, 7, 8]], [[9, 10, 11, 12, 13, 14]]
        with torch.no_grad():
            gap = (
                (
                    completion_scores(adapted, prompt, completion, 1.0, 0).logp
                    - completion_scores(base, prompt, completion, 1.0, 0).logp
                )
                .abs()
                .max()
            )
        assert gap > 1e-3, gap
        if not restart:
            return

        saved_step, saved_version = rows[-1]["step"], rows[-1]["version"]
        saved = load_checkpoint(tmp_path / "learner" / "checkpoints")["model"]  # before the restart overwrites it
        again = swarm.join("learner-again", "learner", wait=False, **learner_args(tmp_path, *_sets(*LORA)))
        again.ready_fields(timeout=180)
        ready = again.wait_line("learner ready:", 120)
        match = re.fullmatch(r"version (\d+) \((\w+)\)", ready)
        assert match and match.group(2) == "resumed" and int(match.group(1)) == saved_version, ready
        after = wait_rows(steps_file, lambda r: len(r) >= len(rows) + 2, 180, "2 steps after the restart")
        new = after[len(rows) :]
        assert [r["step"] for r in new[:2]] == [saved_step + 1, saved_step + 2]
        # the warmup goes on where it stopped (linear in the step): the schedule was restored
        slope = (rows[-1]["learning_rate"] - rows[-2]["learning_rate"]) / (rows[-1]["step"] - rows[-2]["step"])
        assert slope > 0
        expected = rows[-1]["learning_rate"] + slope * (new[0]["step"] - rows[-1]["step"])
        assert abs(new[0]["learning_rate"] - expected) < 1e-3 * expected, (new[0]["learning_rate"], expected)
        assert again.stop(timeout=120) == 0, again.stderr()[-2000:]
        # the checkpoint held the last version's adapters, and training went on from them: the first version
        # after the restart is nearer the last one than a fresh start (lora_B = 0) is
        last, first = store.state_dict(saved_version), store.state_dict(saved_version + 1)
        assert saved.keys() == last.keys() and all(torch.equal(saved[k].to(last[k].dtype), last[k]) for k in last)
        b = [k for k in last if "lora_B" in k]
        moved = sum(float((first[k] - last[k]).norm() ** 2) for k in b) ** 0.5
        from_fresh = sum(float(first[k].norm() ** 2) for k in b) ** 0.5
        assert moved < 0.5 * from_fresh, (moved, from_fresh)
