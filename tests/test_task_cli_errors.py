"""A task that cannot be built ends the real CLI (`swarmnode.cli.main`, here in-process) with one `error:` line and
its exit code, before any model is built: an unknown task, a reward module that is not there, a dataset file that
is not there, a column the dataset does not have."""

from __future__ import annotations

import json
import signal
import sys

import pytest

from swarmnode.cli import main
from swarmnode.errors import ExitCode


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["swarmnode", *args])
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as done:
            main()
    finally:
        signal.signal(signal.SIGINT, handler)  # main() installs its own; the test session keeps pytest's
    return int(done.value.code or 0), capsys.readouterr().err


def test_each_task_mistake_is_one_line_and_its_exit_code(monkeypatch, capsys, tmp_path):
    rows = tmp_path / "questions.jsonl"
    rows.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    base = ["train-local", "--config", "tiny-cpu", "--steps", "1", "--set", "model.tiny.warm_start_steps=0"]
    cases = [
        (["--set", "task.name=no_such_task"], ExitCode.USAGE, ["'no_such_task'", "installed:", "reasoning_gym"]),
        (["--set", "task.reward_funcs=[no_such_module:reward]"], ExitCode.MISSING, ["no module 'no_such_module'"]),
        (["--set", "task.name=dataset", "--set", "task.path=/nonexistent.jsonl"], ExitCode.MISSING, ["no such file"]),
        (
            ["--set", "task.name=dataset", "--set", f"task.path={rows}"],
            ExitCode.MISSING,
            ["task.args.prompt_column 'prompt'", "columns: question, answer"],
        ),
    ]
    for args, code, needles in cases:
        got, err = run_main(monkeypatch, capsys, *base, *args)
        lines = [line for line in err.splitlines() if line.startswith("error: ")]
        assert got == code and len(lines) == 1 and "Traceback" not in err, (args, got, err[-2000:])
        assert all(n in lines[0] for n in needles), lines[0]
