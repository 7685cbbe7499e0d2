"""Reusable helpers for multi-process swarm tests: start a bootstrap / joined nodes / status as real
subprocesses on 127.0.0.1 (NAT mapping and AutoNAT off), wait for their ready lines, and always clean up by pid.

    with LocalSwarm(tmp_path) as swarm:
        boot = swarm.bootstrap()
        node = swarm.join("sampler", role="sampler")
        doc = swarm.status()
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from swarmnode.identity import Identity
from swarmnode.local.swarm import Proc, spawn_node

LOOPBACK = "/ip4/127.0.0.1/tcp/0"
FAST_NET = [
    "network.nat_port_map=false",
    "network.auto_nat=false",
    "network.heartbeat_interval=1",
    "network.missed_beats_to_expire=2",
]


def swarmnode_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "swarmnode", *args]


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def pid_alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def p2pd_children(pid: int) -> list[int]:
    """pids of the p2pd daemons `pid` started."""
    out = []
    for child in child_pids(pid):
        try:
            if "p2pd" in Path(f"/proc/{child}/cmdline").read_text(errors="replace"):
                out.append(child)
        except OSError:
            continue
    return out


def assert_ready_after(output: str, *before: str) -> None:
    """`ready` means ready: each of `before` (lines a node prints while it loads its model, warm-starts it, publishes
    or fetches its first version) comes before its `ready ` line, in that order."""
    lines = output.splitlines()
    ready = next((i for i, line in enumerate(lines) if line.startswith("ready ")), None)
    assert ready is not None, output[-2000:]
    where = [next((i for i, line in enumerate(lines) if line.startswith(b)), None) for b in before]
    assert None not in where and where == sorted(where) and where[-1] < ready, (before, where, ready, output[-2000:])


@dataclass
class NodeProc(Proc):
    """A swarmnode subprocess started by the package's launcher (`spawn_node`), stderr apart from stdout."""

    p2pd: list[int] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stdout(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stderr(self) -> str:
        return self.err.read_text(errors="replace") if self.err and self.err.exists() else ""

    def wait_line(self, prefix: str, timeout: float = 60.0) -> str:
        """The rest of the first stdout line starting with `prefix`; AssertionError if it never comes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.stdout().splitlines():
                if line.startswith(prefix):
                    return line[len(prefix) :].strip()
            if self.popen.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(
            f"{self.name} printed no {prefix!r} (rc={self.popen.poll()}):\n"
            f"{self.stdout()[-2000:]}\n{self.stderr()[-3000:]}"
        )

    def ready_fields(self, timeout: float = 180.0) -> dict[str, str]:
        line = self.wait_line("ready ", timeout)
        self.p2pd = p2pd_children(self.pid)
        return dict(part.split("=", 1) for part in line.split() if "=" in part)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        """Signal the node, wait; SIGKILL it and its daemons if it does not exit (a SIGKILLed node's p2pd too)."""
        code = self.signal_and_wait(sig, timeout)
        for pid in self.p2pd:
            if pid_alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return code


class LocalSwarm:
    """Starts nodes under `root`; `close()` (or leaving the `with`) stops every one of them by pid."""

    def __init__(self, root: Path, run_id: str = "test-run", extra_sets: list[str] | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self.sets = [*FAST_NET, f"run_id={run_id}", *(extra_sets or [])]
        self.procs: list[NodeProc] = []
        self.initial_peers: str | None = None
        self.learner_keys: list[str] = []  # peer ids of the working learners joined so far

    def _set_args(self) -> list[str]:
        return [a for s in self.sets for a in ("--set", s)]

    def spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None, python_args: list[str] | None = None
    ) -> NodeProc:
        """Start node `name` with one torch thread (the nodes of a test share 2 cores: thread pools of every core
        each spin against each other), unless `env` or the caller's own OMP_NUM_THREADS says otherwise.
        `python_args` go between the interpreter and `-m swarmnode` (a wrapper script: `tests/shifted_sampler.py`)."""
        started = spawn_node(self.root, name, args, separate_stderr=True, env=env, threads=1, python_args=python_args)
        proc = NodeProc(started.name, started.popen, started.log, started.err)
        self.procs.append(proc)
        return proc

    def bootstrap(self, name: str = "bootstrap", log_interval: float = 1.0, extra: list[str] | None = None) -> NodeProc:
        proc = self.spawn(
            name,
            [
                "bootstrap",
                *self._set_args(),
                "--host-maddrs",
                LOOPBACK,
                "--json",
                "--identity-path",
                str(self.root / f"{name}.key"),
                "--log-interval",
                str(log_interval),
                *(extra or []),
            ],
        )
        self.initial_peers = proc.wait_line("initial-peers:")
        proc.ready_fields()
        return proc

    def join(
        self,
        name: str,
        role: str = "sampler",
        *,
        identity: Path | None = None,
        wait: bool = True,
        extra: list[str] | None = None,
        env: dict[str, str] | None = None,
        initial_peers: list[str] | None = None,
        work: bool = False,
        python_args: list[str] | None = None,
    ) -> NodeProc:
        """A joined node; `work=False` (default) advertises the role with `--idle` (no model, no role loop). A
        working sampler trusts the working learners joined before it (`trust.learner_keys`), unless `extra`
        says otherwise. `python_args`: as `spawn`."""
        peers = initial_peers or [self.initial_peers]
        key = identity or self.root / f"{name}.key"
        trust: list[str] = []
        if work and role == "learner":
            self.learner_keys.append(Identity.load_or_create(key).peer_id)
        elif work and not any("learner_keys" in a or "accept-any" in a for a in extra or []):
            trust = (
                ["--set", f"trust.learner_keys=[{','.join(self.learner_keys)}]"]
                if self.learner_keys
                else ["--insecure-accept-any-learner"]
            )
        args = [
            "join",
            *self._set_args(),
            "--role",
            role,
            "--host-maddrs",
            LOOPBACK,
            *([] if work else ["--idle"]),
            "--identity-path",
            str(key),
            *trust,
            *(extra or []),
        ]
        for peer in peers:
            args += ["--initial-peers", peer]
        proc = self.spawn(name, args, env, python_args)
        if wait:
            proc.ready_fields()
        return proc

    def status(self, timeout: float = 60.0, sets: list[str] | None = None) -> dict:
        """`swarmnode status --json` from a separate client-mode process (`sets`: more `--set` values)."""
        extra = [a for s in sets or [] for a in ("--set", s)]
        result = subprocess.run(
            swarmnode_cmd("status", *self._set_args(), *extra, "--json", "--initial-peers", self.initial_peers),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, f"status failed ({result.returncode}):\n{result.stderr[-3000:]}"
        return json.loads(result.stdout)

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(timeout=10)

    def __enter__(self) -> LocalSwarm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
