"""`swarmnode hardware` says how much disk the run needs: every part of a node's data directory is bounded by its
config (weight versions, checkpoint, group journal, steps file, accepted ids), and a larger `learner.keep_versions` asks for more."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmnode.config import load_config
from swarmnode.learner.journal import journal_limits
from swarmnode.node.disk_need import disk_need, format_disk, group_bytes
from swarmnode.node.hardware import estimate_memory
from swarmnode.swarm.rollout_push.seen import SeenIds, journal_bytes_at_most


def test_the_disk_a_node_needs_follows_its_config():
    cfg = load_config("tiny-cpu", [])
    estimate = estimate_memory(cfg)
    disk = disk_need(cfg, estimate)
    assert disk["version_bytes"] == estimate.weights_bytes > 0
    assert disk["sampler_bytes"] == (cfg.learner.keep_versions + 1) * disk["version_bytes"]
    assert disk["journal_bytes"] == journal_limits(cfg.learner, cfg.sync.max_staleness)["hard_limit"] * group_bytes(
        cfg.sampler
    )
    assert disk["learner_bytes"] > disk["sampler_bytes"] + 2 * disk["checkpoint_bytes"]
    more = load_config("tiny-cpu", ["learner.keep_versions=40"])
    assert disk_need(more, estimate_memory(more))["sampler_bytes"] == 41 * disk["version_bytes"]
    assert format_disk(disk).startswith("disk: sampler ~") and "learner.keep_versions" in format_disk(disk)
    assert disk["learner_bytes"] >= disk["steps_log_bytes"] + disk["seen_ids_bytes"] + disk["journal_bytes"]


def test_the_accepted_ids_journal_stays_under_its_bound(tmp_path):
    """A 2-hour soak's learner wrote 7 MB of accepted group ids, a file no estimate counted: it is compacted, and
    `disk_need` counts its largest size."""
    capacity, batch = 500, 64
    seen = SeenIds(capacity, tmp_path / "seen_groups")
    largest = 0
    for n in range(200):  # 12,800 ids: 25x the capacity
        seen.add_many([f"{n:032x}{i:032x}" for i in range(batch)])
        largest = max(largest, (tmp_path / "seen_groups").stat().st_size)
    seen.close()
    assert capacity * 65 < largest <= journal_bytes_at_most(capacity, batch)
    again = SeenIds(capacity, tmp_path / "seen_groups")  # a restart remembers the newest ids
    assert f"{199:032x}{batch - 1:032x}" in again and len(again) == capacity


def test_lora_versions_are_the_adapters():
    cfg = load_config("tiny-cpu", ["learner.lora.enabled=true", "learner.learning_rate=1e-4"])
    estimate = estimate_memory(cfg)
    disk = disk_need(cfg, estimate)
    assert 0 < disk["version_bytes"] < estimate.weights_bytes


@pytest.mark.usefixtures("starts_processes")
def test_hardware_reports_the_disk():
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "swarmnode", "hardware", "--json"],
        capture_output=True,
        text=True,
        timeout=280,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["disk"]["sampler_bytes"] > 0
