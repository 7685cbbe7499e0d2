"""A local swarm of real `swarmnode` processes on 127.0.0.1 (what `swarmnode demo` and the benches run): the
model and learner keys prepared once, then a bootstrap, learners and samplers started as subprocesses that the
caller stops by pid (`DemoRun.stop`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from swarmnode.config import load_config
from swarmnode.errors import SwarmnodeError


class DemoError(SwarmnodeError, RuntimeError):
    """The demo could not start or a node died; the message says which and shows its last output."""


@dataclass
class Proc:
    """A node subprocess with its log file (stdout, and stderr too unless `err` holds it apart)."""

    name: str
    popen: subprocess.Popen
    log: Path
    err: Path | None = None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def signal_and_wait(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send `sig` to the node (once: a second signal makes a node exit at once), then `wait_or_kill`."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        return self.wait_or_kill(timeout)

    def wait_or_kill(self, timeout: float) -> int:
        """Wait up to `timeout` s for the node to exit, then SIGKILL its process group; its exit code."""
        try:
            return self.popen.wait(timeout=max(0.1, timeout))
        except subprocess.TimeoutExpired:
            kill_group(self.popen)
            return self.popen.wait(timeout=10)


def kill_group(popen: subprocess.Popen) -> None:
    """SIGKILL a node's process group (the node and its p2pd), if it is still there."""
    try:
        os.killpg(popen.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def spawn_node(
    workdir: Path,
    name: str,
    args: list[str],
    *,
    separate_stderr: bool = False,
    env: dict[str, str] | None = None,
    prefix: list[str] | None = None,
    python_args: list[str] | None = None,
    threads: int | None = None,
) -> Proc:
    """Start `swarmnode <args>` as node `name`, its output in `<workdir>/<name>.log` (stderr in `<name>.err` with
    `separate_stderr`): the one launcher of the demo, the tests and the benches. The node runs in its own session
    (Ctrl-C reaches the caller only, which stops its nodes) and is sent SIGTERM if the caller dies. `threads`: its
    torch threads (OMP_NUM_THREADS, MKL_NUM_THREADS; None: torch's default, every core), unless the caller's own
    environment sets OMP_NUM_THREADS; `env` overrides both."""
    log = Path(workdir) / f"{name}.log"
    err = Path(workdir) / f"{name}.err" if separate_stderr else None
    popen = subprocess.Popen(
        # -P: a swarmnode/ in the cwd must not shadow us
        [*(prefix or []), sys.executable, "-P", *(python_args or []), "-m", "swarmnode", *args],
        stdout=log.open("wb"),
        stderr=err.open("wb") if err else subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with_parent,
        env={**_node_env(), **_thread_env(threads), **(env or {})},
    )
    return Proc(name, popen, log, err)


LEARNER_STOP_GRACE_S = 300.0  # the learner's final checkpoint write, on a loaded 2-core machine
MAX_DEMO_LEARNERS = 8  # learners one local demo may run (each a process training on this machine)


def learner_names(learners: int) -> list[str]:
    """The demo's learner node names: `learner` alone (its data in `<workdir>/learner`, as before), else
    `learner1` .. `learnerN`."""
    if not 1 <= learners <= MAX_DEMO_LEARNERS:
        raise DemoError(
            f"--learners {learners}: expected 1 to {MAX_DEMO_LEARNERS} (each learner is a process on this machine)"
        )
    return ["learner"] if learners == 1 else [f"learner{i}" for i in range(1, learners + 1)]


@dataclass
class DemoRun:
    """The processes of one demo and where they write."""

    workdir: Path
    procs: list[Proc] = field(default_factory=list)
    killed: list[Proc] = field(default_factory=list)  # killed on purpose (a restart test), no longer watched
    # per node name: a command prefix (e.g. `taskset -c 0`) and Python options before `-m swarmnode` (e.g. a
    # profiler); benchmarks pin and profile nodes with them, the demo leaves them empty
    prefix: Callable[[str], list[str]] = lambda _name: []
    python_args: Callable[[str], list[str]] = lambda _name: []
    # per node name: the IPv4 address it listens on (None: the config's `network.host_maddrs`, 127.0.0.1 for the
    # bootstrap); a benchmark that runs each node in its own network namespace gives each its own address
    host: Callable[[str], str | None] = lambda _name: None
    # torch threads of each learner and sampler (OMP_NUM_THREADS, MKL_NUM_THREADS): None leaves torch's default
    # (every core, for each node: on a small machine the nodes' thread pools then spin against each other and
    # generation runs ~35x slower); `start_swarm` sets each node's share of the cores. An OMP_NUM_THREADS of the
    # caller's own wins.
    threads: int | None = None

    def host_args(self, name: str, default: str | None = None) -> list[str]:
        """`--host-maddrs` for node `name` when it has an address of its own (or a `default`), else none."""
        address = self.host(name) or default
        return ["--host-maddrs", f"/ip4/{address}/tcp/0"] if address else []

    def start(self, name: str, args: list[str]) -> Proc:
        proc = spawn_node(
            self.workdir,
            name,
            args,
            prefix=self.prefix(name),
            python_args=self.python_args(name),
            threads=None if name == "bootstrap" else self.threads,
        )
        self.procs.append(proc)
        return proc

    def kill(self, name: str) -> None:
        """SIGKILL the node `name` and its process group (its p2pd's watchdog then stops the daemon)."""
        proc = next(p for p in self.procs if p.name == name)
        kill_group(proc.popen)
        proc.popen.wait(timeout=30)
        self.procs.remove(proc)
        self.killed.append(proc)

    def check_alive(self) -> None:
        for proc in self.procs:
            code = proc.popen.poll()
            if code is not None:
                raise DemoError(f"{proc.name} exited with code {code}; its last output:\n{proc.tail()}")

    def stop(self, grace: float = 15.0, learner_grace: float = LEARNER_STOP_GRACE_S) -> None:
        """SIGTERM every node (samplers first, bootstrap last), wait, then SIGKILL what is left. The learner gets
        `learner_grace` seconds: on SIGTERM it writes its checkpoint (1.6 GB for SmolLM2-135M with the optimiser
        state), and a SIGKILL in the middle of that write loses the run's last steps."""
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        start = time.monotonic()
        for proc in self.procs:
            allowed = learner_grace if proc.name.startswith("learner") else grace
            proc.wait_or_kill(start + allowed - time.monotonic())


def _node_env() -> dict[str, str]:
    """The nodes import this very package (the one the demo runs from), whatever the current directory holds."""
    package_root = str(Path(__file__).resolve().parent.parent)
    path = [package_root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(dict.fromkeys(path))}


def _thread_env(threads: int | None) -> dict[str, str]:
    if not threads or "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM us when the demo dies, even by SIGKILL (Linux prctl)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass  # not Linux: the demo's own stop() still stops every node


def wait_for_line(proc: Proc, prefix: str, timeout: float) -> str:
    """The rest of the first line of `proc`'s log starting with `prefix`; DemoError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in proc.log.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        if proc.popen.poll() is not None:
            raise DemoError(f"{proc.name} exited with code {proc.popen.returncode}:\n{proc.tail()}")
        time.sleep(0.2)
    raise DemoError(f"{proc.name} did not print {prefix!r} within {timeout:.0f} s:\n{proc.tail()}")


def prepare_swarm(
    root: Path, config: str, sets: list[str], say: Callable[[str], None] = print, learners: int = 1
) -> list[str]:
    """Build (or find cached) the run's model and the learners' keys in `root`; returns `sets` plus those that
    make samplers trust only these learners (and, for several, `learner.max_learners`). Slow the first time (the
    tiny model's warm start)."""
    # identity and models import hivemind and torch (seconds): only a demo that runs needs them, not `--help`
    from swarmnode.identity import Identity
    from swarmnode.model.models import resolve_model_path

    cfg = load_config(config, sets)
    say(f"preparing the model {cfg.model.name} (built or converted once, then cached)...")
    resolve_model_path(cfg.model, cfg.task, progress=say)
    keys = [Identity.load_or_create(root / f"{name}.key").peer_id for name in learner_names(learners)]
    several = [f"learner.max_learners={learners}"] if learners > 1 else []
    return [*sets, f"trust.learner_keys=[{','.join(keys)}]", *several]  # samplers trust only these learners


def start_swarm(
    run: DemoRun, config: str, sets: list[str], say: Callable[[str], None] = print, learners: int = 1, samplers: int = 2
) -> dict[int, list[str]]:
    """Start a local swarm in `run.workdir` (after `prepare_swarm`, whose `sets` it takes): a bootstrap, then
    `learners` learners (`learner_names`, each with its data in `<workdir>/<name>`) and `samplers` samplers
    joining it, each with its share of the cores (`threads_per_node`) unless `run.threads` is set. Returns each
    sampler's `join` arguments (to start it again)."""
    if run.threads is None:
        run.threads = threads_per_node(learners + samplers)
    args = node_args(config, sets, start_bootstrap(run, config, sets, say))
    start_learners(run, args, learners)
    return start_samplers(run, args, samplers)


def threads_per_node(nodes: int) -> int:
    """Torch threads for each of `nodes` compute nodes sharing this machine's usable cores (at least one)."""
    return max(1, len(os.sched_getaffinity(0)) // max(1, nodes))


def start_bootstrap(run: DemoRun, config: str, sets: list[str], say: Callable[[str], None] = print) -> str:
    """Start the swarm's bootstrap; its multiaddr once it is up."""
    boot = run.start(
        "bootstrap",
        [
            "bootstrap",
            *_config_args(config, sets),
            *run.host_args("bootstrap", "127.0.0.1"),
            "--identity-path",
            str(run.workdir / "bootstrap.key"),
        ],
    )
    peers = wait_for_line(boot, "initial-peers:", timeout=90)
    say(f"bootstrap up: {peers}")
    return peers


def node_args(config: str, sets: list[str], peers: str) -> list[str]:
    """`join` arguments every node of the swarm shares."""
    return ["join", *_config_args(config, sets), "--initial-peers", peers]


def start_learners(run: DemoRun, args: list[str], learners: int = 1) -> None:
    """Start `learners` learners (`learner_names`) with the shared `node_args`."""
    for name in learner_names(learners):
        run.start(
            name,
            [
                *args,
                "--role",
                "learner",
                "--set",
                f"data_dir={run.workdir / name}",
                "--identity-path",
                str(run.workdir / f"{name}.key"),
                "--public-name",
                name,
                *run.host_args(name),
            ],
        )


def start_samplers(run: DemoRun, args: list[str], samplers: int = 2) -> dict[int, list[str]]:
    """Start samplers `sampler1`..`samplerN` with the shared `node_args`; each one's `join` arguments."""
    root = run.workdir
    sampler_args = {
        i: [
            *args,
            "--role",
            "sampler",
            "--set",
            f"data_dir={root / f'sampler{i}'}",
            "--identity-path",
            str(root / f"sampler{i}.key"),
            "--public-name",
            f"sampler{i}",
            *run.host_args(f"sampler{i}"),
        ]
        for i in range(1, samplers + 1)
    }
    for i, one in sampler_args.items():
        run.start(f"sampler{i}", one)
    return sampler_args


def _config_args(config: str, sets: list[str]) -> list[str]:
    return ["--config", config, *[a for one in sets for a in ("--set", one)]]
