"""The learner's signals to the swarm, with real processes on 127.0.0.1 (tiny-cpu: a bootstrap, a learner and
samplers):

- an engine shift: a second sampler whose engine reports log-probs off by a fixed shift on a few sequences
  (`tests/shifted_sampler.py`) joins a learner with TRL's sequence-level masked correction on: the masked share
  (`masked_frac`, what the dashboard shows) rises, the steps holding its groups mask rows, and training goes on;
- the ack's `s`: on a model warm-started near saturation (reward ~0.9, about half the groups all-solved) the
  learner tells its sampler which prompts came back all-solved or all-failed, and the sampler redraws them (its
  health's `prompts_told`, `prompts_redrawn`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from restart_helpers import WORK, learner_args, steps, wait_for, wait_rows
from swarm_helpers import LocalSwarm

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

SHIFTER = str(Path(__file__).with_name("shifted_sampler.py"))
CORRECTION = [  # the run's (learner and trust settings are shared by every node)
    "learner.vllm_importance_sampling_correction=true",
    "learner.vllm_importance_sampling_clip_min=0.25",
    "learner.vllm_importance_sampling_clip_max=4.0",
    "trust.verify_tolerance=1.0",  # checks stay on; this engine's shift is within what they admit
]
NEAR_SATURATION = ["--set", "model.tiny.warm_start_steps=300", "--set", "model.tiny.warm_start_correct=1.0"]


def health(swarm: LocalSwarm, peer_id: str) -> dict:
    """`peer_id`'s health as `swarmnode status --json` shows it (what the dashboard reads)."""
    doc = swarm.status(timeout=150)  # a status client on a loaded machine takes its time
    return next((p.get("health") or {} for p in doc["peers"] if p["peer_id"] == peer_id), {})


def mean(values: list[float]) -> float:
    return sum(values) / max(1, len(values))


def start(swarm: LocalSwarm, tmp: Path, *sets: str):
    """A bootstrap, a learner and a sampler (`sets`: more arguments for both); the learner, its id, the sampler's."""
    swarm.bootstrap()
    learner = swarm.join("learner", "learner", wait=False, **learner_args(tmp, *sets))
    learner_id = learner.ready_fields(timeout=300)["peer_id"]  # a loaded machine starts nodes slowly
    sampler = swarm.join(
        "honest", "sampler", work=True, wait=False, extra=[*WORK, *sets, "--set", f"data_dir={tmp / 'h'}"]
    )
    return learner, learner_id, sampler.ready_fields(timeout=300)["peer_id"]


@pytest.mark.slow  # a bootstrap, a learner and two samplers: ~1-2 min on 2 cores
@pytest.mark.timeout(900)
def test_an_engine_shift_raises_the_masked_share_on_the_dashboard_and_training_goes_on(tmp_path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    with LocalSwarm(tmp_path, extra_sets=CORRECTION) as swarm:
        learner, learner_id, _ = start(swarm, tmp_path)
        before = wait_rows(steps_file, lambda rows: len(rows) >= 25, 240, "25 steps of the honest sampler")
        # staleness alone, after the start's burst (the first steps draw groups of the versions before them)
        honest = mean([r["masked_fraction"] for r in before[5:] if r.get("trained")])
        shifted = swarm.join(
            "shifted",
            "sampler",
            work=True,
            wait=False,
            extra=[*WORK, "--set", f"data_dir={tmp_path / 's'}"],
            python_args=[SHIFTER],
        )
        shifted_id = shifted.ready_fields(timeout=300)["peer_id"]
        shown = wait_for(
            lambda: (h := health(swarm, learner_id)).get("masked_frac", 0) > max(0.05, 2 * honest) and h,
            300,
            "the learner's masked share on the dashboard",
            lambda: str([(r["step"], r.get("masked_fraction"), r["sampler_ids"]) for r in steps(steps_file)[-5:]]),
        )
        seen = len(steps(steps_file))
        rows = wait_rows(steps_file, lambda rows: len(rows) >= seen + 10, 180, "10 steps after the masked share rose")
        out = learner.stdout()
    mixed = [r for r in rows[len(before) :] if r.get("trained") and shifted_id in r["sampler_ids"]]
    masked = mean([r["masked_fraction"] for r in mixed])
    assert len(mixed) >= 5 and masked > max(2 * honest, honest + 0.05), (honest, [r["masked_fraction"] for r in mixed])
    assert all(r["importance_sampling_ratio_max"] <= 4.0 for r in mixed)  # what is left is inside the bounds
    assert sum(bool(r.get("trained")) for r in rows[seen:]) >= 8  # training goes on
    assert f"caught sampler {shifted_id}" not in out  # the checks admit this engine
    print(
        f"masked share: honest steps {honest:.3f}, steps with the shifted sampler {masked:.3f} ({len(mixed)}); "
        f"dashboard {shown['masked_frac']}"
    )


@pytest.mark.slow  # a bootstrap, a learner and a sampler: ~1 min on 2 cores (the warm start once, ~40 s)
@pytest.mark.timeout(900)
def test_the_learners_acks_tell_the_sampler_saturated_prompts_and_it_redraws_them(tmp_path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    with LocalSwarm(tmp_path) as swarm:
        _, _, sampler_id = start(swarm, tmp_path, *NEAR_SATURATION)
        first = wait_for(
            lambda: (h := health(swarm, sampler_id)).get("prompts_redrawn", 0) > 0 and h,
            300,
            "the sampler's redraws of told prompts",
            lambda: str([(r["step"], r.get("zero_signal_fraction")) for r in steps(steps_file)[-5:]]),
        )
        later = wait_for(
            lambda: (h := health(swarm, sampler_id)).get("groups_sent", 0) > first["groups_sent"] + 100 and h,
            300,
            "100 more groups from the sampler",
        )
    assert any(r.get("zero_signal_fraction", 0) > 0 for r in steps(steps_file))  # saturated groups to tell
    assert 0 < first["prompts_told"] <= later["prompts_told"] <= 100  # arithmetic up to 9: 100 prompts, some held out
    redrawn = later["prompts_redrawn"] - first["prompts_redrawn"]
    made = later["groups_sent"] - first["groups_sent"]
    assert redrawn > 0.2 * made, (first, later)  # at least a fifth of the draws hit a told prompt and were redone
    print(f"sampler: told {later['prompts_told']} prompts, redrew {redrawn} draws for {made} groups")
