"""Data-plane benchmark: weight fetch vs raw hivemind stream vs plain TCP, 1 vs 4 fetchers, delta bytes,
rollout latency with 8 nodes. Every figure is printed next to its baseline from the same run.

    python bench/data-plane/data_plane.py [--mb 500] [--fetchers 4] [--repeat 2] [--samplers 7] [--groups 60]
                               [--skip-rollouts] [--profile DIR] [--json FILE]

The publisher (learner) lives in this process; each receiver is its own process with its own p2pd, so
fetchers run in parallel as they would on separate machines. CPU seconds (python + its p2pd, both sides) are
printed per GB: on a shared 2-core machine they are steadier than wall time. Targets (issue 6): fetch >= 0.9x
the raw stream, 4 fetchers <= 1.5x the time of one, rollout p99 < 200 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch
from hivemind.p2p import P2P, PeerID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT  # noqa: E402  (also puts this checkout's package first on sys.path)
from benchlib.netns_hosts import in_namespace, limited_hosts, missing_for_namespaces  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.swarm.weights import ChunkSchedule, WeightFetcher, WeightServer, WeightStore  # noqa: E402

RUN = "bench"
RAW = "bench/raw/1"
PIECE = 4 << 20
P2P_KW = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False)


_DAEMONS: list[psutil.Process] = []


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process and of its p2pd daemon(s)."""
    if not _DAEMONS:  # scanning /proc allocates a lot (and triggers GC): find the daemons once
        _DAEMONS.extend(c for c in psutil.Process().children() if "p2pd" in c.name())
    daemons = 0.0
    for d in _DAEMONS:  # direct children only: the bench's workers are children of the publisher
        with contextlib.suppress(psutil.Error):
            t = d.cpu_times()
            daemons += t.user + t.system
    t = os.times()
    return {"python": t.user + t.system, "p2pd": daemons}


def cpu_delta(before: dict[str, float]) -> dict[str, float]:
    after = cpu_seconds()
    return {k: after[k] - before[k] for k in before}


def make_state(mb: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """`mb` MB of float32 in 4 MB tensors (a ~125M-parameter model at 500 MB)."""
    g = torch.Generator().manual_seed(seed)
    return {f"layer.{i}.weight": torch.randn(1024, 1024, generator=g) for i in range(mb // 4)}


# ------------------------------------------------------------------------------------------------ workers
async def worker(args) -> None:
    """A receiving peer: reads JSON commands on stdin, answers JSON lines on stdout (with CPU seconds used)."""
    out = lambda obj: print(json.dumps(obj), flush=True)  # noqa: E731
    kw = {**P2P_KW, "host_maddrs": [f"/ip4/{args.host}/tcp/0"]}
    p2p = await P2P.create(initial_peers=[args.initial] if args.initial else [], **kw)
    store = WeightStore(args.dir, RUN, keep_versions=4)
    server = await WeightServer(store).start(p2p)
    identity = Identity.generate()  # signs what this peer publishes (the swarm phase's learner)
    maddr = str((await p2p.get_visible_maddrs())[0]) + f"/p2p/{p2p.peer_id}"
    out({"peer_id": str(p2p.peer_id), "maddr": maddr, "key": identity.peer_id})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    fresh = 0
    while line := await reader.readline():
        cmd = json.loads(line)
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        if cmd["op"] == "fetch":
            target = store
            if cmd.get("fresh"):  # a throwaway store: the same version fetched again from nothing
                fresh += 1
                target = WeightStore(Path(args.dir) / f"fresh{fresh}", RUN, keep_versions=4)
            fetcher = WeightFetcher(p2p, target, [cmd["learner_key"]], layout=None)
            cpu0, t0 = cpu_seconds(), time.perf_counter()  # the fetch alone, not making or removing the store
            with profiled(args.profile and f"{args.profile}/fetch{fresh}.prof"):
                await fetcher.fetch([PeerID.from_base58(h) for h in cmd["holders"]], cmd["version"])
            s = fetcher.last_stats
            res = {
                "fetched": s.fetched_bytes,
                "reused": s.reused_bytes,
                "served_chunks": server.served_chunks,
                "seconds": time.perf_counter() - t0,
                "cpu": cpu_delta(cpu0),
            }
            if target is not store:
                del target, fetcher  # the buffer goes with them
                shutil.rmtree(Path(args.dir) / f"fresh{fresh}", ignore_errors=True)
        elif cmd["op"] == "raw_p2p":
            buf = bytearray(cmd["bytes"])
            _, r, w = await p2p.call_binary_stream_handler(PeerID.from_base58(cmd["peer"]), RAW)
            await _read_into(r, buf, w)
            res = {"seconds": time.perf_counter() - t0, "cpu": cpu_delta(cpu0)}  # freeing `buf` is not timed
        elif cmd["op"] == "raw_tcp":
            buf = bytearray(cmd["bytes"])
            r, w = await asyncio.open_connection("127.0.0.1", cmd["port"], limit=PIECE)
            await _read_into(r, buf, w)
            res = {"seconds": time.perf_counter() - t0, "cpu": cpu_delta(cpu0)}
        elif cmd["op"] == "publish":  # fresh content per version
            store.publish(cmd["version"], make_state(cmd["mb"], seed=cmd["version"]), identity)
            res = {}
        elif cmd["op"] == "served":
            res = {"served_chunks": server.served_chunks}
        else:
            raise ValueError(cmd)
        out({"seconds": time.perf_counter() - t0, "cpu": cpu_delta(cpu0), **res})  # res may time its own part
        buf = None
    await p2p.shutdown()


@contextlib.contextmanager
def profiled(path: str | None):
    """cProfile the block into `path` (no-op without a path)."""
    if not path:
        yield
        return
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    try:
        yield
    finally:
        prof.disable()
        prof.dump_stats(path)


async def _read_into(reader: asyncio.StreamReader, buf: bytearray, writer: asyncio.StreamWriter) -> None:
    """The raw baseline's receive path: pieces copied into one preallocated buffer, then a 1-byte ack."""
    view, pos = memoryview(buf), 0
    while pos < len(buf):
        piece = await reader.readexactly(min(PIECE, len(buf) - pos))
        view[pos : pos + len(piece)] = piece
        pos += len(piece)
    writer.write(b"k")
    await writer.drain()
    writer.close()


class Worker:
    def __init__(
        self,
        initial: str | None,
        directory: Path,
        profile: str | None = None,
        *,
        netns: str | None = None,
        host: str = "127.0.0.1",
    ):
        cmd = [sys.executable, __file__, "--worker", "--dir", str(directory), "--host", host]
        cmd += (["--initial", initial] if initial else []) + (["--profile", profile] if profile else [])
        self.proc = subprocess.Popen(
            (in_namespace(netns) if netns else []) + cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        hello = self.recv()
        self.peer_id, self.maddr, self.key = hello["peer_id"], hello["maddr"], hello["key"]

    def send(self, **cmd) -> None:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def recv(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("worker died")
        return json.loads(line)

    async def ask(self, **cmd) -> dict:
        self.send(**cmd)
        return await asyncio.to_thread(self.recv)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


# ------------------------------------------------------------------------------------------------ phases
async def measured(coro) -> dict:
    """Run one worker command; add the sender side's (this process + its p2pd) CPU seconds."""
    cpu0 = cpu_seconds()
    res = await coro
    res["sender_cpu"] = cpu_delta(cpu0)
    return res


async def weights_bench(args, tmp: Path) -> dict:
    learner = Identity.generate()
    p2p = await P2P.create(**P2P_KW)
    initial = str((await p2p.get_visible_maddrs())[0]) + f"/p2p/{p2p.peer_id}"
    store = WeightStore(tmp / "learner", RUN, keep_versions=4)
    server = await WeightServer(store).start(p2p)
    state = make_state(args.mb)
    t0 = time.perf_counter()
    store.publish(1, state, learner)
    publish_s = time.perf_counter() - t0
    payload = memoryview(store.buffer(1))
    nbytes = len(payload)

    async def raw_handler(info, reader, writer):
        for off in range(0, nbytes, PIECE):
            writer.write(payload[off : off + PIECE])
            await writer.drain()
        await reader.readexactly(1)
        writer.close()

    await p2p.add_binary_stream_handler(RAW, raw_handler)
    tcp = await asyncio.start_server(lambda r, w: raw_handler(None, r, w), "127.0.0.1", 0)
    port = tcp.sockets[0].getsockname()[1]
    workers = [Worker(initial, tmp / f"w{i}", args.profile) for i in range(args.fetchers)]
    res: dict = {"mb": nbytes / 1e6, "publish_s": publish_s, "tcp": [], "raw": [], "fetch": []}
    me = str(p2p.peer_id)
    try:
        one = workers[0]
        for _ in range(args.repeat):  # interleaved, so load changes hit every method alike
            res["tcp"].append(await measured(one.ask(op="raw_tcp", port=port, bytes=nbytes)))
            res["raw"].append(await measured(one.ask(op="raw_p2p", peer=me, bytes=nbytes)))
            res["fetch"].append(
                await measured(one.ask(op="fetch", holders=[me], version=1, fresh=True, learner_key=learner.peer_id))
            )
        if args.fetchers < 2:
            return res
        # N concurrent fetchers of version 2 (fresh content), each told about the learner and every other worker
        for t in state.values():
            t.mul_(-1)
        store.publish(2, state, learner, parent_version=1)
        others = workers[1:]
        served0, cpu0, t0 = server.served_chunks, cpu_seconds(), time.perf_counter()
        rs = await asyncio.gather(
            *[
                w.ask(
                    op="fetch",
                    holders=[me] + [o.peer_id for o in others if o is not w],
                    version=2,
                    learner_key=learner.peer_id,
                )
                for w in others
            ]
        )
        res["concurrent_s"] = time.perf_counter() - t0
        res["concurrent_sender_cpu"] = cpu_delta(cpu0)
        res["concurrent"] = rs
        res["concurrent_n"] = len(others)
        res["learner_served_chunks"] = server.served_chunks - served0
        res["peer_served_chunks"] = sum([(await w.ask(op="served"))["served_chunks"] for w in others])
        # into an empty store, like the concurrent fetchers' (`one` already holds version 1)
        res["alone"] = await measured(
            one.ask(op="fetch", holders=[me], version=2, fresh=True, learner_key=learner.peer_id)
        )
        # delta: change 10% of the tensors; a fetcher holding v2 (from the concurrent phase) fetches v3
        for name in list(state)[::10]:
            state[name].add_(1.0)
        m3 = store.publish(3, state, learner, parent_version=2)
        r3 = await others[0].ask(op="fetch", holders=[me], version=3, learner_key=learner.peer_id)
        res["delta_total"], res["delta_fetched"], res["delta_reused"] = m3.total_bytes, r3["fetched"], r3["reused"]
    finally:
        for w in workers:
            w.close()
        tcp.close()
        await p2p.shutdown()
    return res


async def swarm_bench(args, tmp: Path) -> dict:
    """1 vs N fetchers when every host's upload is limited (network-bound, not CPU-bound): the publisher and
    each fetcher in its own namespace."""
    with limited_hosts(args.fetchers + 1, args.swarm_mbit) as hosts:
        (pub_ns, pub_ip), rest = hosts[0], hosts[1:]
        nodes = [Worker(None, tmp / "pub", netns=pub_ns, host=pub_ip)]
        try:
            pub = nodes[0]
            nodes += [Worker(pub.maddr, tmp / f"s{i}", netns=ns, host=ip) for i, (ns, ip) in enumerate(rest)]
            one, others = nodes[1], nodes[2:]
            await pub.ask(op="publish", mb=args.mb, version=1)
            alone = await one.ask(op="fetch", holders=[pub.peer_id], version=1, learner_key=pub.key)
            await pub.ask(op="publish", mb=args.mb, version=2)
            served0, t0 = (await pub.ask(op="served"))["served_chunks"], time.perf_counter()
            rs = await asyncio.gather(
                *[
                    w.ask(
                        op="fetch",
                        holders=[pub.peer_id] + [o.peer_id for o in others if o is not w],
                        version=2,
                        learner_key=pub.key,
                    )
                    for w in others
                ]
            )
            return {
                "mbit": args.swarm_mbit,
                "alone_s": alone["seconds"],
                "concurrent_s": time.perf_counter() - t0,
                "each_s": [r["seconds"] for r in rs],
                "n": len(others),
                "learner_served": (await pub.ask(op="served"))["served_chunks"] - served0,
                "peer_served": sum([(await w.ask(op="served"))["served_chunks"] for w in others]),
            }
        finally:
            for w in nodes:
                w.close()


def rollout_bench(args, tmp: Path) -> dict:
    """1 learner + N sampler processes (each its own p2pd): send -> learner buffer latency."""
    script = str(ROOT / "tests" / "gossip_peer.py")
    procs: list[subprocess.Popen] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}

    def start(*a: str, ready: Path) -> subprocess.Popen:
        p = subprocess.Popen(
            [sys.executable, script, *a, "--ready", str(ready)],
            start_new_session=True,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(p)
        while not (ready.exists() and ready.read_text()):
            if p.poll() is not None:
                raise RuntimeError(f"{a[0]} died")
            time.sleep(0.05)
        return p

    try:
        learner = start(
            "learner",
            "--identity",
            str(tmp / "l.key"),
            "--received",
            str(tmp / "received"),
            "--journal",
            str(tmp / "journal"),
            ready=tmp / "l.ready",
        )
        addr = (tmp / "l.ready").read_text()
        samplers = [
            start(
                "sampler",
                "--identity",
                str(tmp / f"s{i}.key"),
                "--learner",
                addr,
                "--count",
                str(args.groups),
                "--interval",
                "0.1",
                "--created",
                str(tmp / f"c{i}"),
                "--tag",
                f"s{i}",
                ready=tmp / f"s{i}.ready",
            )
            for i in range(args.samplers)
        ]
        for p in samplers:
            p.wait(300)
        os.killpg(learner.pid, signal.SIGTERM)
        learner.wait(30)
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    rows = [line.split() for line in (tmp / "received").read_text().splitlines()]
    lat = sorted((float(r) - float(c)) * 1000 for _, c, r in rows)
    q = statistics.quantiles(lat, n=100, method="inclusive")
    return {"groups": len(lat), "p50_ms": q[49], "p99_ms": q[98], "max_ms": lat[-1], "nodes": args.samplers + 1}


def plan_bench(n_chunks: int, partial_holders: int = 3, refresh_every: int = 5) -> dict:
    """CPU cost of the fetcher's chunk scheduling (ChunkSchedule: have-maps, rarest-first takes) for a manifest of
    `n_chunks`: one complete holder and `partial_holders` peers that gain chunks as the fetch goes, each peer's
    have-map refreshed every `refresh_every` chunks (about the fetcher's 50 ms at a 400 MB/s fetch)."""

    async def run() -> dict:
        rng = random.Random(0)
        order = list(range(n_chunks))
        rng.shuffle(order)
        holders = ["publisher"] + [f"peer{k}" for k in range(partial_holders)]
        work = ChunkSchedule(order, holders, max_failures=10, n_chunks=n_chunks)
        nb = (n_chunks + 7) // 8
        maps = {h: bytearray(nb) for h in holders[1:]}
        spent, takes, updates = 0.0, 0, 0
        t0 = time.process_time()
        work.set_have("publisher", bytes([255]) * nb + bytes(nb))
        spent += time.process_time() - t0
        while work.pending:
            for _k, h in enumerate(holders):
                if h != "publisher" and takes % refresh_every == 0:
                    for i in rng.sample(range(n_chunks), 2):  # the peer got two more chunks from elsewhere
                        maps[h][i >> 3] |= 1 << (i & 7)
                    answer = bytes(maps[h]) + bytes(nb)
                    t0 = time.process_time()
                    work.set_have(h, answer)
                    spent += time.process_time() - t0
                    updates += 1
                t0 = time.process_time()
                for i in work.take(h, 1):
                    work.done(i)
                spent += time.process_time() - t0
                takes += 1
        return {"chunks": n_chunks, "cpu_s": spent, "takes": takes, "updates": updates}

    return asyncio.run(run())


def cpu_per_gb(runs: list[dict], nbytes: float) -> str:
    """Median receiver and sender CPU seconds per GB moved (python + p2pd each, and all four together)."""
    gb = nbytes / 1e9
    med = lambda side, part: statistics.median(r[side][part] for r in runs) / gb  # noqa: E731
    parts = [med(side, part) for side in ("cpu", "sender_cpu") for part in ("python", "p2pd")]
    total = statistics.median(sum(r["cpu"].values()) + sum(r["sender_cpu"].values()) for r in runs) / gb
    return (
        f"CPU-s/GB recv {parts[0]:.2f}+{parts[1]:.2f}, send {parts[2]:.2f}+{parts[3]:.2f} (python+p2pd), "
        f"total {total:.2f}"
    )


def report(w: dict) -> None:
    mb = w["mb"]
    sec = {k: min(r["seconds"] for r in w[k]) for k in ("tcp", "raw", "fetch")}
    print(
        f"weights: {mb:.0f} MB state, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} "
        f"(publish {w['publish_s']:.2f} s); best speed of {len(w['tcp'])} interleaved runs, median CPU"
    )
    print(f"  plain TCP loopback      {mb / sec['tcp']:6.0f} MB/s   {cpu_per_gb(w['tcp'], mb * 1e6)}")
    print(f"  raw hivemind stream     {mb / sec['raw']:6.0f} MB/s   {cpu_per_gb(w['raw'], mb * 1e6)}")
    print(f"  WeightFetcher (1 peer)  {mb / sec['fetch']:6.0f} MB/s   {cpu_per_gb(w['fetch'], mb * 1e6)}")
    pairs = [r["seconds"] / f["seconds"] for r, f in zip(w["raw"], w["fetch"])]
    print(
        f"  fetch vs raw stream: {sec['raw'] / sec['fetch']:.2f}x best-of, {statistics.median(pairs):.2f}x median "
        f"of interleaved pairs ({', '.join(f'{x:.2f}' for x in pairs)}); target >= 0.9x"
    )
    if "concurrent_s" not in w:
        return
    n, alone = w["concurrent_n"], w["alone"]["seconds"]
    total_cpu = sum(sum(r["cpu"].values()) for r in w["concurrent"]) + sum(w["concurrent_sender_cpu"].values())
    alone_cpu = sum(w["alone"]["cpu"].values()) + sum(w["alone"]["sender_cpu"].values())
    print(
        f"  1 fetcher alone {alone:.2f} s ({alone_cpu:.1f} CPU-s); {n} concurrent {w['concurrent_s']:.2f} s "
        f"({total_cpu:.1f} CPU-s, all processes) = {w['concurrent_s'] / alone:.2f}x (target <= 1.5x); "
        f"CPU-bound floor on {os.cpu_count()} cores: {total_cpu / os.cpu_count() / alone:.2f}x"
    )
    each = ", ".join(f"{r['seconds']:.2f} s" for r in w["concurrent"])
    print(
        f"    each: {each}; chunks served by peers "
        f"{w['peer_served_chunks']}, by the learner {w['learner_served_chunks']}"
    )
    print(
        f"  delta update (10% of tensors changed): fetched {w['delta_fetched'] / 1e6:.1f} MB of "
        f"{w['delta_total'] / 1e6:.0f} MB ({w['delta_fetched'] / w['delta_total']:.1%}), reused "
        f"{w['delta_reused'] / 1e6:.0f} MB"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--fetchers", type=int, default=4, help="concurrent fetchers (plus one more for baselines)")
    ap.add_argument("--repeat", type=int, default=5, help="interleaved TCP / raw / fetch runs")
    ap.add_argument("--samplers", type=int, default=7)
    ap.add_argument("--groups", type=int, default=60, help="groups per sampler (10/s each)")
    ap.add_argument("--skip-rollouts", action="store_true")
    ap.add_argument("--skip-loopback", action="store_true", help="only the upload-limited phase (and rollouts)")
    ap.add_argument(
        "--swarm-mbit",
        type=int,
        default=200,
        help="upload limit per host for the namespaced 1-vs-N phase (0: skip; needs root, iproute2)",
    )
    ap.add_argument(
        "--plan-chunks",
        type=int,
        nargs="*",
        default=[4000, 32000],
        help="manifest sizes (chunks of 4 MiB) for the scheduling-cost phase",
    )
    ap.add_argument("--profile", help="directory: cProfile each worker fetch into it")
    ap.add_argument("--json", help="also write every figure to this JSON file")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--initial")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--dir")
    args = ap.parse_args()
    if args.worker:
        logging.basicConfig(level=os.environ.get("BENCH_LOG", "WARNING"), stream=sys.stderr)
        asyncio.run(worker(args))
        return
    args.fetchers += 1
    tmp = Path(tempfile.mkdtemp(prefix="swarmnode-bench-"))
    try:
        w = {} if args.skip_loopback else asyncio.run(weights_bench(args, tmp))
        if w:
            report(w)
        sw = None
        if args.swarm_mbit and (why := missing_for_namespaces()):
            print(f"  upload-limited phase skipped: {why}")
        elif args.swarm_mbit:
            sw = asyncio.run(swarm_bench(args, tmp))
        if sw:
            w["swarm"] = sw
            mb_s = args.swarm_mbit / 8 * 1e6 / 2**20 * 1.048576
            print(
                f"  upload-limited hosts ({sw['mbit']} Mbit/s = {mb_s:.0f} MB/s each, tc tbf, one namespace per "
                f"node): 1 fetcher {sw['alone_s']:.2f} s; {sw['n']} concurrent {sw['concurrent_s']:.2f} s = "
                f"{sw['concurrent_s'] / sw['alone_s']:.2f}x (target <= 1.5x); chunks served by peers "
                f"{sw['peer_served']}, by the publisher {sw['learner_served']}"
            )
        rate = (w["mb"] * 1e6 / min(f["seconds"] for f in w["fetch"])) if "fetch" in w else 400e6
        for n in args.plan_chunks:
            plan = plan_bench(n)
            transfer_s = n * (4 << 20) / rate
            print(
                f"  scheduling {n} chunks ({n * 4 / 1024:.0f} GiB; {plan['takes']} takes, {plan['updates']} have-map "
                f"updates): {plan['cpu_s']:.2f} CPU-s = {plan['cpu_s'] / transfer_s:.2%} of the transfer time at "
                f"{rate / 1e6:.0f} MB/s"
            )
            w.setdefault("plan", []).append(plan)
        r = None if args.skip_rollouts else rollout_bench(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if r:
        print(
            f"rollouts: {r['nodes']} nodes, {r['groups']} groups, send -> learner buffer p50 {r['p50_ms']:.1f} ms, "
            f"p99 {r['p99_ms']:.1f} ms, max {r['max_ms']:.1f} ms (target p99 < 200 ms)"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"weights": w, "rollouts": r, "load": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
