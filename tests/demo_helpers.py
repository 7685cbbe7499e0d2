"""`swarmnode demo` run as a subprocess, and the check that it left no node running, shared by the demo tests."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil


def run_demo(tmp_path, *args: str, timeout: float = 840) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "swarmnode", "demo", "--json", "--workdir", str(tmp_path / "demo"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"demo failed ({result.returncode}):\n{result.stderr[-4000:]}"
    return json.loads(result.stdout)


def assert_no_node_left(doc: dict) -> None:
    alive = [
        pid
        for pid in doc["node_pids"]
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]
    assert not alive, f"demo left nodes running: {alive}"
