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
from scale.uplinks import Uplinks, port_of  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.local.swarm import DemoError, Proc, _die_with_parent, kill_group, prepare_swarm  # noqa: E402

# the lab's run: production heartbeat (5 s), samplers capped (the learner's credits decide what is made), versions
# published every `publish_every` steps (each sampler fetches each one). Lab mode, never `join`'s default: a
# startup timeout of 300 s (join's is 60 s; here it counts from a node's start slot, see `pacing.StartGate`, but
# also bounds a new sampler's first fetch of the weights while a wave of 64 fetches at once on 2 cores)
LAB_SETS = [
    "run_id=scale-lab",
    "network.heartbeat_interval=5",
    "network.missed_beats_to_expire=3",
    "network.startup_timeout=300",
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
    stagger_s: float = 0.5  # between a process's nodes' starts (their p2pd also wait for a start slot)
    chunk_bytes: int | None = 256 << 10  # versions in this many bytes a chunk (None: swarmnode's 4 MiB)
    start_slots: int = 2  # p2pd starting at once in the whole lab (`pacing.StartGate`); 0: no gate
    groups_per_s: float = 8.0  # one host process's samplers' generation budget together (`pacing.SharedPace`)
    host_wait_s: float = 180.0  # at most this long for a host's imports before the next host starts
    bootstraps: int = 1  # bootstrap nodes (each its own process); every other node is given all of them
    uplink_mbit: float | None = None  # samplers' uplinks (`uplinks.Uplinks`; the lab in a namespace of its own)
    learner_mbit: float | None = None  # the learner's uplink (with `uplink_mbit`; None: uncapped)
    uplinks: Uplinks | None = None
    nodes_made: int = 0
    procs: list[Proc] = field(default_factory=list)
    started: float = 0.0

    def __enter__(self) -> ScaleLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _host(self, name: str, nodes: list[dict], initial: list[str], sets: list[str]) -> Proc:
        for node in nodes:
            node["peer"] = Identity.load_or_create(node["key"]).peer_id
        spec = {
            "name": name,
            "config": self.config,
            "sets": sets,
            "initial_peers": initial,
            "nodes": nodes,
            "sample_s": self.sample_s,
            "stagger_s": self.stagger_s,
            "chunk_bytes": self.chunk_bytes,
            "groups_per_s": self.groups_per_s,
            "gate_dir": str(self.workdir / "start-slots") if self.start_slots else None,
            "gate_slots": self.start_slots,
        }
        path = self.workdir / f"{name}.json"
        path.write_text(json.dumps(spec, indent=1))
        log = self.workdir / f"{name}.out"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        popen = subprocess.Popen(
            [sys.executable, "-P", str(HERE / "host.py"), str(path)],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            env=env,
        )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def _node(self, name: str, role: str) -> dict:
        node = {
            "name": name,
            "role": role,
            "key": str(self.workdir / f"{name}.key"),
            "data_dir": str(self.workdir / name),
        }
        if self.uplinks is not None:  # a port of its own, its uplink capped by role (bootstraps uncapped)
            node["port"] = port_of(self.nodes_made)
            mbit = {"sampler": self.uplink_mbit, "learner": self.learner_mbit}.get(role)
            if mbit:
                self.uplinks.cap(node["port"], mbit)
        self.nodes_made += 1
        return node

    def _log_lines(self, host: str, texts: tuple[str, ...]) -> list[str]:
        path = (self.workdir / f"{host}.json").with_suffix(".log")
        return [
            ln
            for ln in (path.read_text(errors="replace").splitlines() if path.exists() else [])
            if any(t in ln for t in texts)
        ]

    def _wait_log(self, host: str, text: str | tuple[str, ...], count: int, timeout: float) -> list[str]:
        """Lines of `host`'s node log holding `text` (or any of several), once there are `count` of them."""
        texts = (text,) if isinstance(text, str) else text
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = self._log_lines(host, texts)
            if len(lines) >= count:
                return lines
            self.check_alive()
            time.sleep(0.5)
        raise DemoError(f"{host}: {count} x {text!r} not seen within {timeout:.0f} s")

    def start(self, say=print, ready_timeout: float | None = None) -> None:
        """Bootstrap, learner, then the samplers' hosts; returns when every sampler is ready."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.uplink_mbit and self.uplinks is None:
            self.uplinks = Uplinks()
        sets = prepare_swarm(
            self.workdir, self.config, [*LAB_SETS, f"learner.publish_every={self.publish_every}", *self.sets], say=say
        )
        self.run_sets = sets
        self.initial_peers = []
        for i in range(self.bootstraps):  # the second and later join the first
            host, name = ("boot", "bootstrap") if i == 0 else (f"boot{i + 1}", f"bootstrap{i + 1}")
            self._host(host, [self._node(name, "bootstrap")], self.initial_peers[:1], sets)
            line = self._wait_log(host, "initial-peers:", 1, 180)[0]
            self.initial_peers.append(line.split("initial-peers:", 1)[1].strip())
        self._host("learner", [self._node("learner", "learner")], self.initial_peers, sets)
        self._wait_log("learner", "learner ready", 1, 300)
        self.started = time.time()
        self.sampler_count, self.host_count = 0, 0
        self.add_samplers(self.samplers, say, ready_timeout)

    def add_samplers(self, count: int, say=print, ready_timeout: float | None = None) -> dict:
        """Start `count` more samplers (`per_host` per process) and wait until each is ready or failed, at most
        `ready_timeout` s (default 300 + 5 s a sampler: their p2pd start one or two at a time); `ready` is then
        now. Returns the wave's figures."""
        ready_timeout = ready_timeout if ready_timeout is not None else 300.0 + 5.0 * count
        say(f"starting {count} samplers, {self.per_host} per process")
        began = time.time()
        names = [f"s{i:03d}" for i in range(self.sampler_count + 1, self.sampler_count + count + 1)]
        groups = [names[i : i + self.per_host] for i in range(0, len(names), self.per_host)]
        hosts, loads = [], [os.getloadavg()[0]]
        for group in groups:  # one host's imports at a time (each takes a core for 10-30 s)
            hosts.append((f"h{self.host_count:02d}", group))
            self._host(hosts[-1][0], [self._node(n, "sampler") for n in group], self.initial_peers, self.run_sets)
            self.host_count += 1
            try:
                if self.host_wait_s > 0:
                    self._wait_log(hosts[-1][0], "host imported", 1, self.host_wait_s)
            except DemoError:
                say(f"{hosts[-1][0]} not imported within {self.host_wait_s:.0f} s; starting the next host")
            loads.append(os.getloadavg()[0])
        deadline = time.monotonic() + ready_timeout
        while True:  # every new sampler ready or failed, or the time is up: go on with those that are ready
            lines = {host: self._log_lines(host, ("sampler ready", " FAILED ")) for host, _ in hosts}
            if len({ln.split()[1] for ls in lines.values() for ln in ls}) >= count or time.monotonic() > deadline:
                break
            self.check_alive()
            loads.append(os.getloadavg()[0])
            time.sleep(1.0)
        ready = [float(ln.split()[0]) - began for ls in lines.values() for ln in ls if "sampler ready" in ln]
        imported = {
            host: float(ls[0].split()[0]) for host, _ in hosts if (ls := self._log_lines(host, ("host imported",)))
        }
        # from the host's imports done (what a volunteer's own machine would not share) to ready
        after_import = [
            float(ln.split()[0]) - imported[host]
            for host, ls in lines.items()
            if host in imported
            for ln in ls
            if "sampler ready" in ln
        ]
        failed = len({ln.split()[1] for ls in lines.values() for ln in ls if " FAILED " in ln})
        late = count - len({ln.split()[1] for ls in lines.values() for ln in ls})  # neither ready nor failed
        if late:
            say(f"{late} of {count} samplers not ready within {ready_timeout:.0f} s; going on without waiting")
        if not ready:
            raise DemoError(f"none of {count} samplers started; see {self.workdir}/h*.log")
        if failed:
            say(f"{failed} of {count} samplers failed to start (see their FAILED lines)")
        self.sampler_count += count
        self.samplers = self.sampler_count
        self.ready = time.time()
        say(f"{count} samplers ready in {self.ready - began:.1f} s ({self.samplers} in all)")
        self.wave = {
            "count": count,
            "failed": failed,
            "late": late,
            "ready_s_p50": sorted(ready)[len(ready) // 2],
            "ready_s_max": max(ready),
            "learner_steps_per_s": self._learner_rate(began, self.ready),
            "load_max": max(loads),
            "load_median": sorted(loads)[len(loads) // 2],
            "ready_after_import_s_max": max(after_import, default=None),
        }
        return self.wave

    @property
    def dht_bucket_size(self) -> int:
        """The run's `network.dht_bucket_size` (Kademlia's k), as its nodes load it."""
        from swarmnode.config import load_config

        return load_config(self.config, self.run_sets).network.dht_bucket_size

    def _learner_rate(self, since: float, until: float) -> float | None:
        """The learner's steps per second between two times (from its host's lines)."""
        rows = [
            ln
            for ln in read_lines([self.workdir / "learner.jsonl"])
            if ln.get("ev") == "node" and since <= ln["t"] <= until and "steps" in ln
        ]
        if len(rows) < 2:
            return None
        return (rows[-1]["steps"] - rows[0]["steps"]) / max(1e-9, rows[-1]["t"] - rows[0]["t"])

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

    def summary(self, since: float | None = None, until: float | None = None) -> dict:
        """The growth figures of this run (`curves.summarise`) from `since` (default: all samplers ready) to
        `until` (default: the last line)."""
        return summarise(
            self.lines(),
            since if since is not None else self.ready,
            samplers=self.samplers,
            started=self.started,
            until=until,
        )

    def status_probe(self, timeout: float = 300.0) -> dict:
        """One `status` snapshot of the run (`status_probe.py` in a process of its own): seconds and bytes; an
        `error` instead when it fails or takes over `timeout` s (a loaded machine), never an exception."""
        sets = [a for one in self.run_sets for a in ("--set", one)]
        try:
            out = subprocess.run(
                [sys.executable, "-P", str(HERE / "status_probe.py"), self.config, self.initial_peers[0], *sets],
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"no snapshot within {timeout:.0f} s"}
        if out.returncode != 0:
            return {"error": (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]}
        return json.loads(out.stdout.strip().splitlines()[-1])

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
        if self.uplinks is not None:
            self.uplinks.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--samplers",
        type=int,
        nargs="+",
        default=[8, 16, 32, 64],
        help="sizes, grown within one run: each step adds samplers (a join wave), then measures",
    )
    ap.add_argument("--seconds", type=float, default=90.0, help="measured time at each size")
    ap.add_argument("--per-host", type=int, default=16)
    ap.add_argument("--publish-every", type=int, default=5)
    ap.add_argument("--chunk-kb", type=int, default=256, help="version chunk size (0: swarmnode's 4 MiB)")
    ap.add_argument("--start-slots", type=int, default=2, help="p2pd starting at once in the lab (0: no gate)")
    ap.add_argument("--groups-per-s", type=float, default=8.0, help="one host process's samplers' generation, together")
    ap.add_argument("--ready-timeout", type=float, help="s a wave may take to be ready (default 300 + 5 per sampler)")
    ap.add_argument(
        "--host-wait",
        type=float,
        default=180.0,
        help="s to wait for a host's imports before starting the next (0: every host at once)",
    )
    ap.add_argument("--bootstraps", type=int, default=1, help="bootstrap nodes; every node is given all of them")
    ap.add_argument("--uplink-mbit", type=float, help="cap each sampler's uplink (run the lab in its own namespace)")
    ap.add_argument("--learner-mbit", type=float, help="cap the learner's uplink (with --uplink-mbit)")
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/scale-lab"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = []
    with ScaleLab(
        args.workdir,
        args.samplers[0],
        per_host=args.per_host,
        sets=args.sets,
        publish_every=args.publish_every,
        chunk_bytes=(args.chunk_kb << 10) or None,
        start_slots=args.start_slots,
        groups_per_s=args.groups_per_s,
        bootstraps=args.bootstraps,
        uplink_mbit=args.uplink_mbit,
        learner_mbit=args.learner_mbit,
        host_wait_s=args.host_wait,
    ) as lab:
        lab.start(ready_timeout=args.ready_timeout)
        wave = lab.wave
        for n in args.samplers:
            if n > lab.samplers:
                wave = lab.add_samplers(n - lab.samplers, ready_timeout=args.ready_timeout)
            load0, since = os.getloadavg()[0], lab.ready
            lab.run_for(args.seconds)
            until = time.time()
            doc = {
                "since": since,
                "until": until,
                "load_start": load0,
                "load_end": os.getloadavg()[0],
                "dht_bucket_size": lab.dht_bucket_size,
                **lab.summary(since, until),
                "join_wave": wave,
            }
            results.append(doc)
            if args.json:  # saved before the status probe, which may be slow
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(results, indent=1, default=str))
            doc["status"] = lab.status_probe()
            print(json.dumps(doc, indent=1, default=str), flush=True)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
