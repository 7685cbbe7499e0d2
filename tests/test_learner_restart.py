"""A learner node stopped in the middle of a run comes back from its checkpoint with the same version numbering,
and the swarm goes on training (real bootstrap, learner and sampler processes on 127.0.0.1)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
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


@pytest.mark.slow  # ~30 s quiet: CI's long-scenario step runs it (.ci/run)
def test_a_restarted_learner_resumes_its_checkpoint_and_version_numbering(tmp_path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    with LocalSwarm(tmp_path) as swarm:
        first = start_learner_and_sampler(swarm, tmp_path)
        wait_rows(steps_file, lambda rows: len(rows) >= 10, 180, "10 learner steps")
        assert first.stop() == 0, first.stderr()[-2000:]  # SIGTERM: finish the step, checkpoint, leave
        before = steps(steps_file)
        saved_step, saved_version = before[-1]["step"], before[-1]["version"]

        again = swarm.join("learner-again", "learner", **learner_args(tmp_path))
        ready = again.wait_line("learner ready:", 120)
        match = re.fullmatch(r"version (\d+) \((\w+)\)", ready)
        assert match and match.group(2) == "resumed" and int(match.group(1)) == saved_version, ready
        after = wait_rows(steps_file, lambda rows: len(rows) >= len(before) + 5, 180, "5 steps after the restart")
        new = after[len(before) :]
        # numbering goes on from the checkpoint: no version is published twice, none is skipped
        assert [r["step"] for r in new[:5]] == list(range(saved_step + 1, saved_step + 6)), new[:5]
        assert [r["version"] for r in new[:5]] == list(range(saved_version + 1, saved_version + 6)), new[:5]
