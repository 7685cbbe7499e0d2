"""The churn soak: two bootstraps, a learner and six samplers (tiny model) on this machine under a seeded schedule
of faults (`faults.py`), measured every `--every` seconds; the samples, the faults and the goals go to
`<out>.json`, the figure to `<out>.png`, the table to `<out>.md`.

    python bench/soak/soak.py --minutes 120 --out bench/soak/results/soak-2h
    python bench/soak/soak.py --minutes 15 --check      # the CI soak: exit 1 when a hard goal is missed

Needs root (a network namespace for the cut sampler, a tmpfs for the small-disk one); `--no-root-faults` leaves
both out. Every process, namespace and mount it makes is removed on exit, even on failure.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # bench/, for benchlib
sys.path.insert(0, str(HERE))
import faults as fault_plan  # noqa: E402
import lab  # noqa: E402
import probes  # noqa: E402

from benchlib import config_args  # noqa: E402  (also puts this checkout's package first on sys.path)
from swarmnode.local.swarm import Proc, kill_group, prepare_swarm, spawn_node, wait_for_line  # noqa: E402

SMALL_FS_MB = 16  # the small-disk sampler's filesystem (a tiny-model sampler keeps ~6 MB)
SOAK_SETS = [
    "network.nat_port_map=false",
    "network.auto_nat=false",
    "network.heartbeat_interval=2",
    "sampler.max_groups_per_second=3",  # six samplers and a learner on a shared 2-core machine
    "learner.max_groups_per_second_per_sampler=50",
    # two-digit sums: a task the tiny model does not solve within the run, so most groups carry a learning signal
    # and the learner's step rate follows its intake (with one-digit sums it was solved in 45 minutes and the rate
    # followed the reward: groups whose completions are all right are dropped)
    "task.max_operand=99",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Slot:
    """One node of the soak, across its lives (restarts)."""

    name: str
    role: str
    data_dir: Path
    metrics_port: int
    metrics_addr: str = "127.0.0.1"
    prefix: list[str] = field(default_factory=list)
    listen: str = "127.0.0.1"
    p2p_port: int = 0
    identity: int = 0  # generation of its key (a restart under a new identity bumps it)
    life: int = 0
    proc: Proc | None = None
    started: float = 0.0
    p2pd: int | None = None
    expected_down: bool = False

    def key(self, workdir: Path) -> Path:
        return workdir / (f"{self.name}.key" if self.identity == 0 else f"{self.name}-{self.identity}.key")

    @property
    def pid(self) -> int | None:
        return self.proc.popen.pid if self.proc and self.proc.popen.poll() is None else None


class Soak:
    """Runs the swarm, applies the faults, samples the processes; `result()` is what the JSON holds."""

    def __init__(self, args: argparse.Namespace, workdir: Path, ns: lab.Namespace | None, disk: Path | None):
        self.args, self.workdir, self.ns, self.disk = args, workdir, ns, disk
        self.t0 = time.monotonic()
        self.samples: list[dict] = []
        self.events: list[dict] = []
        self.heldout: list[dict] = []
        self.journal_at_kill: list[dict] = []
        self.p2pds_left: list[dict] = []  # p2pd daemons of ended lives, checked later for orphans
        self.rng = random.Random(args.seed + 1)
        host = ns.host_ip if ns else "127.0.0.1"
        self.slots: dict[str, Slot] = {}
        for name in ("bootstrap1", "bootstrap2"):
            self.slots[name] = Slot(name, "bootstrap", workdir / name, free_port(), listen=host, p2p_port=free_port())
        self.slots["learner"] = Slot("learner", "learner", workdir / "learner", free_port(), listen=host)
        for i in range(1, args.samplers + 1):
            name = f"sampler{i}"
            slot = Slot(name, "sampler", workdir / name, free_port(), listen=host)
            if ns and name == args.plan.namespaced:
                slot.prefix, slot.listen, slot.metrics_addr = ns.prefix(), ns.inner_ip, ns.inner_ip
            if disk and name == args.plan.small_disk:
                slot.data_dir = disk / name
            self.slots[name] = slot
        self.sets: list[str] = []

    # -- time and log ---------------------------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() - self.t0

    def event(self, kind: str, target: str, **detail) -> None:
        row = {"t": round(self.now(), 1), "kind": kind, "target": target, **detail}
        self.events.append(row)
        print(f"[{row['t']:7.1f}] {kind} {target} {detail if detail else ''}", flush=True)

    # -- processes ------------------------------------------------------------------------------------------
    def peers(self) -> list[str]:
        return [a for s in ("bootstrap1", "bootstrap2") for a in ("--initial-peers", self.address(s))]

    def address(self, boot: str) -> str:
        return (self.workdir / f"{boot}.addr").read_text().strip()

    def config(self) -> list[str]:
        return ["--config", self.args.config, *[a for one in self.sets for a in ("--set", one)]]

    def start(self, slot: Slot) -> None:
        slot.life += 1
        common = [
            *self.config(),
            "--set",
            f"metrics.port={slot.metrics_port}",
            "--set",
            f"metrics.addr={slot.metrics_addr}",
            "--identity-path",
            str(slot.key(self.workdir)),
        ]
        if slot.role == "bootstrap":
            peers = ["--initial-peers", self.address("bootstrap1")] if slot.name == "bootstrap2" else []
            args = ["bootstrap", *common, "--host-maddrs", f"/ip4/{slot.listen}/tcp/{slot.p2p_port}", *peers]
        else:
            args = [
                "join",
                *common,
                *self.peers(),
                "--role",
                slot.role,
                "--set",
                f"data_dir={slot.data_dir}",
                "--host-maddrs",
                f"/ip4/{slot.listen}/tcp/0",
            ]
        slot.proc = spawn_node(self.workdir, f"{slot.name}.{slot.life}", args, prefix=slot.prefix, threads=1)
        slot.started, slot.p2pd, slot.expected_down = self.now(), None, False
        self.event("start", slot.name, life=slot.life, pid=slot.proc.popen.pid, identity=slot.identity)

    def stop(self, slot: Slot, sig: int, wait: float = 30.0) -> None:
        """Signal the node process alone (as the OOM killer or a user would); the p2pd it leaves is watched."""
        if slot.proc is None:
            return
        slot.expected_down = True
        p2pd = slot.p2pd or probes.p2pd_of(slot.proc.popen.pid)
        if slot.proc.popen.poll() is None:
            slot.proc.popen.send_signal(sig)
        began = time.monotonic()
        try:
            code = slot.proc.popen.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            kill_group(slot.proc.popen)
            code = slot.proc.popen.wait(timeout=10)
        self.event(
            "stopped",
            slot.name,
            life=slot.life,
            signal=signal.Signals(sig).name,
            code=code,
            stop_s=round(time.monotonic() - began, 1),
        )
        if p2pd:
            self.p2pds_left.append({"node": slot.name, "life": slot.life, "pid": p2pd, "t": self.now()})
        slot.proc = None

    # -- faults ---------------------------------------------------------------------------------------------
    def begin(self, f: fault_plan.Fault) -> None:
        slot = self.slots.get(f.target)
        self.event("fault", f.target, fault=f.kind, **f.detail)
        if f.kind == "sampler_kill":
            self.stop(slot, signal.Signals[f.detail["signal"]])
        elif f.kind in ("learner_kill", "bootstrap_kill"):
            self.stop(slot, signal.SIGKILL)
            if f.kind == "learner_kill":
                self.journal_at_kill.append(
                    {"t": self.now(), "life": slot.life, "journal": journal_records(slot.data_dir / "group_journal")}
                )
        elif f.kind == "freeze" and slot.pid:
            os.kill(slot.pid, signal.SIGSTOP)
        elif f.kind == "net_cut" and self.ns:
            self.ns.link(False)
        elif f.kind == "disk_full" and self.disk:
            self.event("filled", f.target, bytes=lab.fill(self.disk), free=lab.free_bytes(self.disk))

    def end(self, f: fault_plan.Fault) -> None:
        slot = self.slots.get(f.target)
        self.event("fault_end", f.target, fault=f.kind)
        if f.kind == "sampler_kill":
            slot.identity = f.detail["identity"]
            self.start(slot)
        elif f.kind in ("learner_kill", "bootstrap_kill"):
            self.start(slot)
        elif f.kind == "freeze" and slot.pid:
            os.kill(slot.pid, signal.SIGCONT)
        elif f.kind == "net_cut" and self.ns:
            self.ns.link(True)
        elif f.kind == "disk_full" and self.disk:
            (self.disk / "filler").unlink(missing_ok=True)

    # -- sampling -------------------------------------------------------------------------------------------
    def sample(self, with_dirs: bool) -> None:
        t = round(self.now(), 1)
        for slot in self.slots.values():
            pid = slot.pid
            if slot.proc is not None and pid is None and not slot.expected_down:
                code = slot.proc.popen.returncode
                self.event("died", slot.name, life=slot.life, code=code, tail=slot.proc.tail(8))
                slot.proc = None
                self.start(slot)  # what a service manager does
                continue
            if pid is None:
                continue
            if slot.p2pd is None or not Path(f"/proc/{slot.p2pd}").exists():
                slot.p2pd = probes.p2pd_of(pid)
            row = {
                "t": t,
                "node": slot.name,
                "life": slot.life,
                "age": round(self.now() - slot.started, 1),
                "rss": probes.rss_mb(pid),
                "fds": probes.open_files(pid),
            }
            if slot.p2pd:
                row.update(
                    p2pd_rss=probes.rss_mb(slot.p2pd),
                    p2pd_fds=probes.open_files(slot.p2pd),
                    conns=probes.tcp_connections(slot.p2pd),
                )
            metrics = probes.scrape(slot.metrics_addr, slot.metrics_port)
            if metrics:
                for key, name in (
                    ("swarmnode_policy_version", "version"),
                    ("swarmnode_groups_sent", "sent"),
                    ("swarmnode_groups_acked", "acked"),
                    ("swarmnode_learner_steps", "steps"),
                    ("swarmnode_groups_received", "received"),
                    ("swarmnode_peers_seen", "peers"),
                ):
                    if (value := probes.metric(metrics, key)) is not None:
                        row[name] = value
            if with_dirs:
                row["dir_bytes"] = probes.dir_bytes(slot.data_dir)
            self.samples.append(row)
        for left in self.p2pds_left:
            if "alive_after" not in left and self.now() - left["t"] >= 30:
                left["alive_after"] = _is_p2pd(left["pid"])
                if left["alive_after"]:
                    self.event("orphan_p2pd", left["node"], life=left["life"], pid=left["pid"])

    def evaluate(self, procs: list, start: bool = True) -> None:
        """Start a held-out evaluation of the learner's checkpoint (at most one at a time); collect finished ones."""
        for popen, t in list(procs):
            if popen.poll() is None:
                continue
            procs.remove((popen, t))
            try:
                self.heldout.append({"t": t, **json.loads(popen.stdout.read().decode().strip().splitlines()[-1])})
            except (ValueError, IndexError):
                pass
        ckpt = self.slots["learner"].data_dir / "checkpoints" / "checkpoint.pt"
        if start and not procs and ckpt.exists():
            copy = self.workdir / "heldout-checkpoint.pt"
            try:
                copy.write_bytes(ckpt.read_bytes())
            except OSError:
                return
            env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            procs.append(
                (
                    subprocess.Popen(
                        [sys.executable, str(HERE / "heldout.py"), str(copy), *self.config()],
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        env=env,
                    ),
                    round(self.now(), 1),
                )
            )

    # -- the run --------------------------------------------------------------------------------------------
    def run(self) -> None:
        args = self.args
        self.sets = prepare_swarm(self.workdir, args.config, [*SOAK_SETS, *args.sets], say=print)
        # the learner's key is the one prepare_swarm made (`learner.key`)
        for name in ("bootstrap1", "bootstrap2"):
            slot = self.slots[name]
            self.start(slot)
            line = wait_for_line(slot.proc, "initial-peers:", 120)
            (self.workdir / f"{name}.addr").write_text(line.split()[0])
        self.start(self.slots["learner"])
        wait_for_line(self.slots["learner"].proc, "learner ready:", 300)
        for i in range(1, args.samplers + 1):
            self.start(self.slots[f"sampler{i}"])
        self.t_ready = self.now()
        duration = args.minutes * 60
        plan = fault_plan.schedule(args.seed, duration, args.plan)
        self.faults = [f.as_dict() for f in plan]
        actions = [(self.t_ready + f.at, 0, i, f) for i, f in enumerate(plan)]
        actions += [(self.t_ready + f.end, 1, i, f) for i, f in enumerate(plan)]
        heapq.heapify(actions)
        next_sample = next_dirs = next_eval = self.now()
        evals: list = []
        end = self.t_ready + duration
        while self.now() < end:
            while actions and actions[0][0] <= self.now():
                _, phase, _, f = heapq.heappop(actions)
                (self.end if phase else self.begin)(f)
            if self.now() >= next_sample:
                dirs = self.now() >= next_dirs
                self.sample(dirs)
                next_sample += args.every
                next_dirs += 30.0 if dirs else 0.0
            if self.now() >= next_eval:
                self.evaluate(evals)
                next_eval += args.eval_every
                self.save_partial()
            time.sleep(0.5)
        for popen, _ in evals:
            popen.wait(timeout=180)
        self.evaluate(evals, start=False)

    def save_partial(self) -> None:
        """The raw measurements so far (a run killed before its end still leaves them)."""
        path = self.workdir / "partial.json"
        path.write_text(json.dumps(self.result(), default=str))

    def close(self) -> None:
        for slot in self.slots.values():
            if slot.pid:
                os.kill(slot.pid, signal.SIGCONT)
        order = sorted(self.slots.values(), key=lambda s: {"sampler": 0, "learner": 1, "bootstrap": 2}[s.role])
        for slot in order:
            if slot.proc is not None and slot.proc.popen.poll() is None:
                slot.proc.popen.send_signal(signal.SIGTERM)
        for slot in order:
            if slot.proc is not None:
                began = time.monotonic()
                slot.proc.wait_or_kill(120 if slot.role == "learner" else 30)
                self.event(
                    "final_stop", slot.name, code=slot.proc.popen.returncode, stop_s=round(time.monotonic() - began, 1)
                )
        for left in self.p2pds_left:
            if _is_p2pd(left["pid"]):
                try:
                    os.kill(left["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def result(self) -> dict:
        learner = self.slots["learner"]
        return {
            "args": {k: v for k, v in vars(self.args).items() if k != "plan"},
            "plan": vars(self.args.plan),
            "t_ready": self.t_ready,
            "samples": self.samples,
            "events": self.events,
            "faults": self.faults,
            "heldout": self.heldout,
            "journal_at_kill": self.journal_at_kill,
            "p2pds_left": self.p2pds_left,
            "steps": read_steps(learner.data_dir / "learner_steps.jsonl"),
            "replays": replay_lines(self.workdir, "learner", learner.life),
            "t0_wall": self.t0_wall,
            "load": os.getloadavg(),
        }


def journal_records(path: Path) -> int:
    """Whole, CRC-valid records in a learner's group journal (what a restart must offer again)."""
    import zlib

    try:
        data = path.read_bytes()
    except OSError:
        return 0
    count = pos = 0
    while pos + 8 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        body = data[pos + 8 : pos + 8 + size]
        if len(body) < size or zlib.crc32(body) != int.from_bytes(data[pos + 4 : pos + 8], "big"):
            break
        count, pos = count + 1, pos + 8 + size
    return count


def read_steps(path: Path) -> list[dict]:
    rows = []
    for p in (path.with_name(path.name + ".1"), path):
        try:
            for line in p.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                rows.append(
                    {
                        k: row.get(k)
                        for k in (
                            "step",
                            "version",
                            "time",
                            "reward_mean",
                            "groups_received",
                            "dropped_stale",
                            "staleness_mean",
                        )
                    }
                )
        except OSError:
            continue
    return rows


def replay_lines(workdir: Path, name: str, lives: int) -> list[dict]:
    """Each learner life's replay lines ("acknowledged groups from before the restart", "groups replayed")."""
    out = []
    for life in range(1, lives + 1):
        try:
            text = (workdir / f"{name}.{life}.log").read_text(errors="replace")
        except OSError:
            continue
        row = {"life": life}
        for line in text.splitlines():
            if line.startswith("acknowledged groups from before the restart:"):
                row["offered"] = {
                    r: int(n) for n, r in (p.split() for p in line.split(":", 1)[1].split(",") if p.strip())
                }
            elif line.startswith("groups replayed after the restart:"):
                row["replayed"] = line.split(":", 1)[1].strip()
            elif line.startswith("learner ready:"):
                row["ready"] = line.split(":", 1)[1].strip()
        out.append(row)
    return out


def _is_p2pd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().startswith("p2pd")
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=120.0, help="run length after the swarm is up")
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--samplers", type=int, default=6)
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--eval-every", type=float, default=300.0, help="seconds between held-out evaluations")
    ap.add_argument("--out", type=Path, default=None, help="results path without suffix (json, md, png)")
    ap.add_argument("--workdir", type=Path, default=None, help="node logs and data (default: a temp dir, kept)")
    ap.add_argument("--no-root-faults", action="store_true", help="no namespace cut, no small filesystem")
    ap.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a hard goal (no lost acknowledged group, "
        "no version going back, RSS slope under the CI bound) is missed",
    )
    config_args(ap)
    args = ap.parse_args()
    args.plan = fault_plan.scaled_plan(args.minutes * 60)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="soak-"))
    if workdir.is_dir() and any(workdir.iterdir()):  # its learner would resume the old run's checkpoint
        ap.error(
            f"--workdir {workdir} is not empty: a soak there would resume the nodes of the run before it; "
            "give a new directory or remove that one"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"soak: {args.minutes:g} min, seed {args.seed}, work dir {workdir}", flush=True)
    root = os.geteuid() == 0 and not args.no_root_faults
    with ExitStack() as stack:
        ns = stack.enter_context(lab.namespace(f"sk{os.getpid() % 10000}")) if root else None
        disk = stack.enter_context(lab.small_fs(workdir / "smalldisk", SMALL_FS_MB)) if root else None
        soak = Soak(args, workdir, ns, disk)
        soak.t0_wall = time.time()
        stack.callback(soak.close)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        failed = None
        try:
            soak.run()
        except Exception as exc:  # still write what was measured
            failed = f"{type(exc).__name__}: {exc}"
            print(f"soak: stopped early ({failed})", flush=True)
        doc = soak.result() if hasattr(soak, "t_ready") else None
    if doc is None:
        return 1
    doc["failed"] = failed
    from report import goals, write_report  # matplotlib: only once the run is over

    doc["goals"] = goals(doc)
    out = args.out or workdir / "soak"
    write_report(out, doc)
    print(json.dumps(doc["goals"]["summary"], indent=1))
    return 1 if args.check and not doc["goals"]["summary"]["ci_pass"] else 0


if __name__ == "__main__":
    sys.exit(main())
