"""A real learner node (127.0.0.1, no sampler: `sample_when_idle`) with `metrics.report_to=tensorboard` and
`learner.eval_every`: its held-out figures land in the steps file, `status --json`, `/metrics` and the event files,
and tensorboard's reader finds the steps file's reward and KL at the same steps (the role's wiring of
`swarmnode.trackers` and `HeldOutEval`; the trackers' own readers are in tests/test_trackers.py)."""

from __future__ import annotations

import urllib.request

import pytest
from restart_helpers import WORK, wait_for
from swarm_helpers import LocalSwarm
from tracker_readers import tensorboard_scalars

from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.local.demo import read_steps

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

EVAL = [
    "learner.sample_when_idle=true",
    "learner.beta=0.04",  # TRL's kl
    "learner.eval_every=3",
    "learner.eval_samples=2",
    "task.eval_size=8",
    "metrics.report_to=tensorboard",
    "metrics.port=0",
]


def _with_evals(rows: list[dict], n: int) -> list[dict] | None:
    """`rows` once `n` of them carry held-out figures."""
    return rows if sum("eval_reward" in r for r in rows) >= n else None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_learner_node_reports_to_tensorboard_and_scores_the_held_out_split(tmp_path):
    pytest.importorskip("tensorboard")
    data = tmp_path / "learner"
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        sets = [a for s in [f"data_dir={data}", *EVAL] for a in ("--set", s)]
        learner = swarm.join("learner", "learner", work=True, extra=[*WORK, *sets])
        out = learner.stdout()
        assert out.index("trackers: tensorboard") < out.index("ready ")
        url = learner.wait_line("metrics: ")
        rows = wait_for(
            lambda: _with_evals(read_steps(data / STEPS_FILE), 2),
            200,
            "two held-out evaluations in the steps file",
            lambda: learner.stdout()[-2000:] + learner.stderr()[-2000:],
        )
        evals = [r for r in rows if "eval_reward" in r]
        assert evals[0]["eval_version"] == 0 and evals[1]["eval_version"] >= 3  # the baseline, then every 3
        for r in evals:
            assert 0.0 <= r["eval_reward"] <= 1.0 and 0.0 <= r["eval_pass_at_k"] <= 1.0 and r["eval_prompts"] == 8
        assert "held-out: version 0, reward" in learner.stdout()
        health = next(p for p in swarm.status()["peers"] if p["role"] == "learner")["health"]
        assert health["eval_version"] >= 3 and "eval_reward" in health and "eval_history" in health
        metrics = urllib.request.urlopen(url, timeout=30).read().decode()
        assert 'swarmnode_heldout_reward{role="learner"}' in metrics
        learner.stop()
    rows = read_steps(data / STEPS_FILE)
    (run_dir,) = (data / "trackers" / "tensorboard").iterdir()
    scalars = tensorboard_scalars(run_dir)
    assert sorted(scalars["reward"]) == [r["step"] for r in rows]  # every step reported
    for r in rows:
        assert scalars["reward"][r["step"]] == pytest.approx(r["reward_mean"], abs=1e-6)
        assert scalars["kl"][r["step"]] == pytest.approx(r["ref_kl"], abs=1e-6)
        assert scalars["swarm/samplers_contributing"][r["step"]] == 1  # itself
    for r in (r for r in rows if "eval_reward" in r):
        assert scalars["eval/reward"][r["step"]] == pytest.approx(r["eval_reward"], abs=1e-6)
    assert "swarm/tokens_per_s" in scalars and "swarm/staleness/bucket_0" in scalars
