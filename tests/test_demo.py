"""End to end: `swarmnode demo` runs a real local swarm (bootstrap, learner, 2 samplers as subprocesses over
p2pd on 127.0.0.1), the learner trains on stale rollouts without collapsing, and nothing is left running."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

DEMO_KEYS = ("learner_steps", "versions_published", "reward_start", "reward_end", "staleness_max",
             "rollouts_received")


def run_demo(tmp_path, *args: str, timeout: float = 840) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "swarmnode", "demo", "--json", "--workdir", str(tmp_path / "demo"), *args],
        capture_output=True, text=True, timeout=timeout,
    )
    assert result.returncode == 0, f"demo failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return json.loads(result.stdout)


@pytest.mark.timeout(900)
def test_demo_swarm_learns_with_stale_data_and_leaves_no_process(tmp_path):
    doc = run_demo(tmp_path, "--steps", "200", "--minutes", "7")
    for key in DEMO_KEYS:
        assert key in doc, key
    assert doc["learner_steps"] >= 200, doc
    assert doc["versions_published"] >= 150
    assert doc["rollouts_received"] >= 8 * 200  # each step trains on 8 groups from the samplers
    assert doc["staleness_max"] >= 1, "async mode: some rollouts must come from older versions"
    # The climb over 200 swarm steps is still within noise (measured +0.045 and +0.001 in two runs; issue #7
    # stays open for it), so this asserts only that training on stale data does not collapse the policy.
    assert doc["reward_end"] > doc["reward_start"] - 0.05, doc
    alive = [pid for pid in doc["node_pids"] if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"demo left nodes running: {alive}"
