"""The scale lab: a run of N nodes on this machine with the real network code, several nodes per process.

    python bench/scale/lab.py --samplers 8 16 32 --seconds 120 --json bench/scale/results/run.json

One bootstrap, one learner (training for real) and N samplers (making real signed groups of the tiny model at a
capped rate, fetching every version and serving it), each node with its own identity, p2pd and DHT node, as
`swarmnode join` runs them (`host.py`: up to `per_host` nodes share one Python process). Every node's
control-plane bytes are counted in its own handlers (`counters.py`); `curves.summarise` turns the lines the hosts
write into the growth figures. `ScaleLab` is what tests import.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # this checkout's swarmnode
sys.path.insert(1, str(HERE.parent))  # bench/, for `scale`

from scale.curves import read_lines, summarise  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.local.swarm import DemoError, Proc, _die_with_parent, kill_group, prepare_swarm  # noqa: E402

# the lab's run: production heartbeat (5 s), samplers capped (the learner's credits decide what is made), versions
# published every `publish_every` steps (each sampler fetches each one)
LAB_SETS = [
    "run_id=scale-lab",
    "network.heartbeat_interval=5",
    "network.missed_beats_to_expire=3",
    "network.startup_timeout=120",
    "sampler.max_groups_per_second=4",
    "learner.checkpoint_every=100000",
]


@dataclass
class ScaleLab:
    """N samplers, a learner and a bootstrap in `per_host`-node processes under `workdir`. `start()`, let it run,
    `summary()`, `stop()` (also on any failure: use `with`)."""

    workdir: Path
    samplers: int
    per_host: int = 16
    config: str = "tiny-cpu"
    sets: list[str] = field(default_factory=list)
    publish_every: int = 40
    sample_s: float = 5.0
    stagger_s: float = 0.2
    procs: list[Proc] = field(default_factory=list)
    started: float = 0.0

    def __enter__(self) -> "ScaleLab":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _host(self, name: str, nodes: list[dict], initial: list[str], sets: list[str]) -> Proc:
        for node in nodes:
            node["peer"] = Identity.load_or_create(node["key"]).peer_id
        spec = {"name": name, "config": self.config, "sets": sets, "initial_peers": initial, "nodes": nodes,
                "sample_s": self.sample_s, "stagger_s": self.stagger_s}
        path = self.workdir / f"{name}.json"
        path.write_text(json.dumps(spec, indent=1))
        log = self.workdir / f"{name}.out"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        popen = subprocess.Popen([sys.executable, "-P", str(HERE / "host.py"), str(path)], stdout=log.open("wb"),
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                 preexec_fn=_die_with_parent, env=env)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def _node(self, name: str, role: str) -> dict:
        return {"name": name, "role": role, "key": str(self.workdir / f"{name}.key"),
                "data_dir": str(self.workdir / name)}

    def _wait_log(self, host: str, text: str, count: int, timeout: float) -> list[str]:
        """Lines of `host`'s node log holding `text`, once there are `count` of them."""
        path = (self.workdir / f"{host}.json").with_suffix(".log")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [ln for ln in (path.read_text(errors="replace").splitlines() if path.exists() else [])
                     if text in ln]
            if len(lines) >= count:
                return lines
            self.check_alive()
            time.sleep(0.5)
        raise DemoError(f"{host}: {count} x {text!r} not seen within {timeout:.0f} s")

    def start(self, say=print, ready_timeout: float = 300.0) -> None:
        """Bootstrap, learner, then the samplers' hosts; returns when every sampler is ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        sets = prepare_swarm(self.workdir, self.config, [*LAB_SETS, f"learner.publish_every={self.publish_every}",
                                                         *self.sets], say=say)
        self._host("boot", [self._node("bootstrap", "bootstrap")], [], sets)
        line = self._wait_log("boot", "initial-peers:", 1, 90)[0]
        initial = [line.split("initial-peers:", 1)[1].strip()]
        self.initial_peers = initial
        self._host("learner", [self._node("learner", "learner")], initial, sets)
        self._wait_log("learner", "learner ready", 1, 180)
        say(f"bootstrap and learner up; starting {self.samplers} samplers, {self.per_host} per process")
        self.started = time.time()
        names = [f"s{i:03d}" for i in range(1, self.samplers + 1)]
        hosts = [names[i:i + self.per_host] for i in range(0, len(names), self.per_host)]
        for h, group in enumerate(hosts):
            self._host(f"h{h:02d}", [self._node(n, "sampler") for n in group], initial, sets)
        for h, group in enumerate(hosts):
            self._wait_log(f"h{h:02d}", "sampler ready", len(group), ready_timeout)
        self.ready = time.time()
        say(f"{self.samplers} samplers ready in {self.ready - self.started:.1f} s")

    def check_alive(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is not None:
                raise DemoError(f"lab process {proc.name} exited with code {proc.popen.returncode}:\n{proc.tail()}")

    def run_for(self, seconds: float, say=print) -> None:
        """Let the run go on for `seconds`, checking every process lives."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.check_alive()
            time.sleep(min(10.0, max(0.0, end - time.monotonic())))
            say(f"  {seconds - max(0.0, end - time.monotonic()):.0f}/{seconds:.0f} s")

    def lines(self) -> list[dict]:
        return read_lines(sorted(self.workdir.glob("*.jsonl")))

    def summary(self, since: float | None = None) -> dict:
        """The growth figures of this run (`curves.summarise`) from `since` (default: all samplers ready)."""
        return summarise(self.lines(), since if since is not None else self.ready, samplers=self.samplers,
                         started=self.started)

    def stop(self) -> None:
        """SIGTERM every host (samplers first), then SIGKILL what is left after 60 s."""
        for proc in reversed(self.procs):
            if proc.popen.poll() is None:
                proc.popen.terminate()
        deadline = time.monotonic() + 60
        for proc in reversed(self.procs):
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_group(proc.popen)
                proc.popen.wait(timeout=10)
        self.procs.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samplers", type=int, nargs="+", default=[8])
    ap.add_argument("--seconds", type=float, default=120.0, help="measured time after every sampler is ready")
    ap.add_argument("--per-host", type=int, default=16)
    ap.add_argument("--publish-every", type=int, default=40)
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/scale-lab"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = []
    for n in args.samplers:
        with ScaleLab(args.workdir / f"n{n}", n, per_host=args.per_host, sets=args.sets,
                      publish_every=args.publish_every) as lab:
            load0 = os.getloadavg()[0]
            lab.start()
            lab.run_for(args.seconds)
            doc = {"samplers": n, "load_start": load0, "load_end": os.getloadavg()[0], **lab.summary()}
        results.append(doc)
        print(json.dumps(doc, indent=1, default=str))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
