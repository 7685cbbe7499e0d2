"""Real learner processes the restart and hostile-swarm tests share: the working tiny-cpu arguments (`WORK`),
a learner's `LocalSwarm.join` arguments, its step records and waiting on them, a bootstrap + learner + sampler."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from swarm_helpers import LocalSwarm

WORK = ["--config", "tiny-cpu", "--set", "model.tiny.warm_start_steps=20"]


def steps(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return rows


def wait_rows(path: Path, predicate, timeout: float, what: str) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = steps(path)
        if predicate(rows):
            return rows
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; rows: {steps(path)[-3:]}")


def learner_args(tmp_path: Path, *sets: str) -> dict:
    """`LocalSwarm.join` arguments of a working tiny-cpu learner with its data under tmp_path/learner."""
    return dict(
        work=True, identity=tmp_path / "learner.key", extra=[*WORK, *sets, "--set", f"data_dir={tmp_path / 'learner'}"]
    )


def start_learner_and_sampler(swarm: LocalSwarm, tmp_path: Path, *sets: str):
    """A bootstrap, a learner (`learner_args`) and a sampler; the learner's process."""
    swarm.bootstrap()
    learner = swarm.join("learner", "learner", **learner_args(tmp_path, *sets))
    swarm.join("sampler", "sampler", work=True, extra=[*WORK, "--set", f"data_dir={tmp_path / 'sampler'}"])
    return learner


def wait_for(predicate, timeout: float, what: str, diagnose=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if value := predicate():
                return value
        except (AssertionError, subprocess.TimeoutExpired):  # a status client that failed on a busy machine
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{diagnose()}")
