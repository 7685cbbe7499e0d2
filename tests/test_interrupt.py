"""Ctrl-C (SIGINT) stops a node, `train-local` and the demo with exit code 130 and leaves no process behind; the demo's nodes
run from a directory that holds a `swarmnode/` folder (a clone's parent) and its temporary work dir is removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from swarm_helpers import LocalSwarm, pid_alive

from swarmnode.errors import ExitCode

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

REPO = Path(__file__).resolve().parent.parent


def descendants(pid: int) -> list[int]:
    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_ctrl_c_stops_a_node_with_exit_code_130_and_its_daemon(tmp_path):
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        node = swarm.join("node", role="sampler")
        daemons = list(node.p2pd)
        assert daemons, "the node runs a p2pd"
        assert node.stop(signal.SIGINT, timeout=60) == ExitCode.INTERRUPTED, node.stderr()[-3000:]
        assert "Traceback" not in node.stderr(), node.stderr()[-3000:]
        wait_for(lambda: not any(pid_alive(pid) for pid in daemons), 30, "the node's p2pd to exit")


@pytest.mark.slow  # ~27 s: the suite's budget (10 min on 2 cores); the other two Ctrl-C tests stay in it
def test_ctrl_c_stops_the_demo_run_from_a_clones_parent_and_removes_its_work_dir(tmp_path):
    parent = tmp_path / "parent"
    (parent / "swarmnode").mkdir(parents=True)  # a clone named swarmnode: would shadow the package on sys.path
    (parent / "swarmnode" / "pyproject.toml").write_text("")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(REPO)}
    demo = subprocess.Popen(
        # -P: as the installed `swarmnode` script runs, the cwd is not on the demo's own path
        [
            sys.executable,
            "-P",
            "-m",
            "swarmnode",
            "demo",
            "--steps",
            "100000",
            "--minutes",
            "30",
            "--set",
            "model.tiny.warm_start_steps=0",
        ],
        cwd=parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    nodes: list[int] = []
    try:

        def learner_ready() -> bool:
            logs = list(scratch.glob("swarmnode-demo-*/learner.log"))
            assert demo.poll() is None, demo.communicate()[1][-3000:]
            return bool(logs) and "learner ready" in logs[0].read_text(errors="replace")

        wait_for(learner_ready, 600, "the demo's learner to start (it imports the package from the clone's parent)")
        nodes = descendants(demo.pid)
        demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
        for pid in descendants(demo.pid) + nodes:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert demo.returncode == ExitCode.INTERRUPTED, err[-3000:]
    assert "Traceback" not in err and "interrupted" in err, err[-3000:]
    assert "stopped: interrupted" in out, out
    wait_for(lambda: not any(pid_alive(pid) for pid in nodes), 30, "every node and daemon to exit")
    assert not list(scratch.glob("swarmnode-demo-*")), "the temporary work dir is removed"


def test_ctrl_c_stops_train_local_with_a_checkpoint_and_exit_code_130(tmp_path, swarmnode_home):
    ckpt = tmp_path / "ckpt"
    fast = [
        "model.tiny.warm_start_steps=0",
        "sampler.device=cpu",
        "learner.device=cpu",
        "sampler.prompts_per_batch=4",
        "learner.prompts_per_step=4",
        "sampler.max_completion_length=6",
        "learner.checkpoint_every=1000",
    ]
    cmd = [
        sys.executable,
        "-m",
        "swarmnode",
        "train-local",
        "-c",
        "tiny-cpu",
        "--steps",
        "100000",
        "--checkpoint-dir",
        str(ckpt),
        *sum((["--set", s] for s in fast), []),
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    try:
        for line in proc.stdout:  # wait for the first trained step, then Ctrl-C
            if line.startswith("step"):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == ExitCode.INTERRUPTED, err[-3000:]
    assert "Traceback" not in err and "interrupted" in err, err[-3000:]
    assert "stopped by signal: checkpoint at step" in out and "done:" in out, out[-3000:]
    assert (ckpt / "checkpoint.pt").is_file()  # checkpoint_every=1000: only the stop wrote it
