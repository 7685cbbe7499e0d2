"""A learner node stopped in the middle of a run comes back from its checkpoint with the same version numbering,
and the swarm goes on training (real bootstrap, learner and sampler processes on 127.0.0.1)."""

from __future__ import annotations

import re

import pytest
from restart_helpers import learner_args, start_learner_and_sampler, steps, wait_rows
from swarm_helpers import LocalSwarm

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes


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
