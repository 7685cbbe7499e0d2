"""A newcomer's first hour (issue 60): what a first run hits answers plainly, at once, in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from swarmnode.errors import ExitCode


def _swarmnode(*args: str, home=None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"SWARMNODE_HOME": str(home)} if home else {})}
    return subprocess.run(
        [sys.executable, "-m", "swarmnode", *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def test_train_local_json_is_json_alone_with_the_warm_start_on_stderr(tmp_path):
    done = _swarmnode(
        "train-local",
        "--config",
        "tiny-cpu",
        "--json",
        "--steps",
        "1",
        "--set",
        "model.tiny.warm_start_steps=2",
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["learner_steps"] == 1
    assert "warm-starting the tiny model" in done.stderr


def test_a_checkpoint_dir_that_is_a_file_fails_before_training(tmp_path):
    (tmp_path / "taken").write_text("")
    done = _swarmnode("train-local", "--config", "tiny-cpu", "--checkpoint-dir", str(tmp_path / "taken"))
    errors = done.stderr.strip().splitlines()
    assert done.returncode == ExitCode.USAGE and len(errors) == 1, done.stderr[-2000:]
    assert "a file, not a directory" in errors[0] and "Traceback" not in done.stderr
