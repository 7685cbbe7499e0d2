"""What a circuit relay costs: weight fetches of versions of three sizes and a stream of rollout-group-sized
pushes from a public peer to a node dialled directly, against the same to a node behind a NAT reached through the
bootstrap's relay; and the relay's bytes and CPU on the bootstrap. In a NAT lab (bench/benchlib/nat_lab.py:
namespaces, every host's uplink capped with tc tbf); the bootstrap is a real `swarmnode bootstrap` (relay service
on by default), the two holders and the fetcher are p2pd hosts started the way a node starts
(`swarmnode.swarm.p2p.start_p2p`, the NATed one with its relay reservation). Both arms run in one lab, one after
the other, per uplink rate; every rate in one run, and the ratios printed together at the end.

    python bench/relay-cost/relay_cost.py [--mbit 20 100] [--sizes-mb 1.4 20 270] [--group-kb 32]
                                          [--push-seconds 8] [--json FILE]

Needs root, iproute2 and iptables. A version is synthetic: random tensors of the size (fp32 under 5 MB, else
bf16), published in a real WeightStore, served by the real WeightServer and fetched by the real WeightFetcher
(manifest, have-map, chunks verified and written). A push is a raw frame of the group's size, acked, 8 in flight
(the RolloutSender's window; no decoding or validation on the receiving end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT), str(HERE.parent)]

PUSH, RUN = "bench/push", "relay-cost"


def _sets(ip: str, boot: str | None) -> list[str]:
    sets = [
        "network.nat_port_map=false",
        "network.auto_nat=false",
        "network.use_relay=true",
        f"network.host_maddrs=[/ip4/{ip}/tcp/0]",
        "network.startup_timeout=60",
    ]
    return sets + ([f"network.initial_peers=[{boot}]"] if boot else [])


async def _host(ip: str, boot: str, relayed: bool):
    from swarmnode.config import load_config
    from swarmnode.identity import Identity
    from swarmnode.swarm.p2p import start_p2p
    from swarmnode.swarm.relay import wait_for_relay

    cfg = load_config(None, _sets(ip, boot))
    p2p = await start_p2p(cfg.network, Identity.generate(), relays=[boot] if relayed else None)
    if relayed and await wait_for_relay(p2p, 30) is None:
        raise SystemExit("no relay reservation in 30 s")
    return p2p


def synthetic_state(nbytes: int, dtype) -> dict:
    """Random tensors of `nbytes` in all (a few tensors of `dtype`): a version of that size that shares no chunk
    with any other."""
    import torch

    itemsize = torch.empty(0, dtype=dtype).element_size()
    n = max(1, nbytes // itemsize)
    parts = [n // 4, n // 4, n // 4, n - 3 * (n // 4)]
    return {
        f"layer.{i}.weight": torch.frombuffer(bytearray(os.urandom(k * itemsize)), dtype=torch.uint8).view(dtype)
        for i, k in enumerate(parts)
        if k
    }


async def receiver(ip: str, boot: str, relayed: bool, sizes_mb: list[float], store_dir: str) -> None:
    """A node holding one synthetic version per size (version k+1 for the k-th size: fp32 for the tiny model,
    bf16 for the others) in a real WeightStore served by the real WeightServer, and acking `PUSH` frames; prints
    its address and waits."""
    import torch

    from swarmnode.identity import Identity
    from swarmnode.swarm.weights import WeightServer, WeightStore

    p2p = await _host(ip, boot, relayed)
    identity = Identity.generate()
    store = WeightStore(store_dir, RUN, keep_versions=len(sizes_mb) + 1)
    for k, mb in enumerate(sizes_mb):
        dtype = torch.float32 if mb < 5 else torch.bfloat16
        store.publish(k + 1, synthetic_state(int(mb * 1e6), dtype), identity, model_id=f"synthetic-{mb:g}MB")
    await WeightServer(store).start(p2p)

    async def push(_info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        size = int.from_bytes(await reader.readexactly(4), "big")
        try:
            while True:
                await reader.readexactly(size)
                writer.write(b"\x01")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    await p2p.add_binary_stream_handler(PUSH, push)
    addrs = [str(a) for a in await p2p.get_visible_maddrs(latest=True)]
    circuit = [a for a in addrs if "p2p-circuit" in a]
    print(
        json.dumps(
            {"addr": (circuit if relayed else [a for a in addrs if f"/{ip}/" in a])[0], "publisher": identity.peer_id}
        ),
        flush=True,
    )
    await asyncio.Event().wait()


async def _fetch(p2p, peer, publisher: str, version: int, store_dir: Path) -> float:
    """Seconds the real WeightFetcher takes to fetch `version` from `peer` into an empty store (manifest,
    have-map, every chunk verified and written)."""
    from swarmnode.swarm.weights import WeightFetcher, WeightStore

    fetcher = WeightFetcher(p2p, WeightStore(store_dir, RUN), [publisher], layout=None, timeout=60.0)
    start = time.perf_counter()
    await fetcher.fetch([peer], version)
    return time.perf_counter() - start


async def _pushes(p2p, peer, size: int, seconds: float, window: int = 8) -> float:
    _, reader, writer = await p2p.call_binary_stream_handler(peer, PUSH)
    writer.write(size.to_bytes(4, "big"))
    frame = os.urandom(size)
    sent = acked = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        while sent - acked < window:
            writer.write(frame)
            sent += 1
        await writer.drain()
        await reader.readexactly(1)
        acked += 1
    elapsed = time.perf_counter() - start
    writer.close()
    return acked / elapsed


def _relay_counters(boot_ns: str, boot_p2pd: int) -> tuple[int, float]:
    """(bytes sent + received on the bootstrap's link, CPU seconds of its p2pd) so far."""
    stat = "/sys/class/net/eth0/statistics"
    out = subprocess.run(
        ["ip", "netns", "exec", boot_ns, "sh", "-c", f"cat {stat}/tx_bytes {stat}/rx_bytes"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    fields = Path(f"/proc/{boot_p2pd}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return int(out[0]) + int(out[1]), cpu


async def sender(
    ip: str,
    boot: str,
    targets: dict[str, dict],
    sizes_mb: list[float],
    group_kb: int,
    push_seconds: float,
    boot_ns: str,
    boot_p2pd: int,
    store_dir: str,
) -> None:
    """From a public host: each size fetched from each receiver, then pushes; JSON on stdout."""
    from hivemind.p2p import PeerID
    from hivemind.utils.multiaddr import Multiaddr

    from swarmnode.swarm.hivemind_compat import connect

    p2p = await _host(ip, boot, relayed=False)
    results: dict[str, dict] = {}
    for arm, target in targets.items():
        addr = target["addr"]
        peer = PeerID.from_base58(addr.rsplit("/p2p/", 1)[1])
        if "p2p-circuit" not in addr:  # a relayed peer is found through the bootstrap (p2pd's routing)
            await connect(p2p, peer, [Multiaddr(addr.rsplit("/p2p/", 1)[0])])
        row: dict = {"fetch_s": {}}
        bytes0, cpu0 = _relay_counters(boot_ns, boot_p2pd)
        for k, mb in enumerate(sizes_mb):
            try:
                row["fetch_s"][str(mb)] = round(
                    await _fetch(p2p, peer, target["publisher"], k + 1, Path(store_dir) / arm / str(k + 1)), 3
                )
            except Exception as exc:  # e.g. a relay that cuts connections at its data limit
                row["fetch_s"][str(mb)] = None
                row.setdefault("errors", []).append(f"{mb:g} MB: {exc}")
        conns = {str(i.peer_id): [str(a) for a in i.addrs] for i in await p2p.list_peers()}
        row["connection"] = conns.get(str(peer))
        try:
            row["groups_per_s"] = round(await _pushes(p2p, peer, group_kb * 1024, push_seconds), 1)
        except Exception as exc:
            row["groups_per_s"] = None
            row.setdefault("errors", []).append(f"pushes: {exc!r}")
        bytes1, cpu1 = _relay_counters(boot_ns, boot_p2pd)
        row["bootstrap_mb"] = round((bytes1 - bytes0) / 1e6, 1)
        row["bootstrap_cpu_s"] = round(cpu1 - cpu0, 2)
        results[arm] = row
    print(json.dumps(results), flush=True)
    await p2p.shutdown()


def _line(proc: subprocess.Popen, prefix: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before printing {prefix!r}")
    raise RuntimeError(f"no {prefix!r} within {timeout} s")


def one_rate(mbit: float, args) -> dict:
    """Both arms at one uplink rate, in one lab."""
    from benchlib.nat_lab import NatLab

    procs: list[subprocess.Popen] = []
    me = [sys.executable, str(Path(__file__).resolve())]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"relay-cost-{os.getpid()}"  # weight stores: GBs at 270 MB
    with NatLab() as lab:
        boot_host = lab.public("boot")  # its link is not capped: the relay forwards both directions
        direct, natted, src = lab.public("direct", mbit), lab.behind_nat("natted", mbit=mbit), lab.public("src", mbit)
        try:
            tmp.mkdir(exist_ok=True)
            boot = subprocess.Popen(
                [
                    *lab.prefix(boot_host),
                    sys.executable,
                    "-m",
                    "swarmnode",
                    "bootstrap",
                    "--host-maddrs",
                    f"/ip4/{boot_host.ip}/tcp/31337",
                    "--identity-path",
                    str(tmp / "boot.key"),
                    "--set",
                    "network.use_relay=true",
                    "--set",
                    "network.auto_nat=false",
                    "--set",
                    "network.nat_port_map=false",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
            )
            procs.append(boot)
            peers = _line(boot, "initial-peers:").split(": ", 1)[1].strip()
            boot_p2pd = next(
                int(c)
                for c in Path(f"/proc/{boot.pid}/task/{boot.pid}/children").read_text().split()
                if "p2pd" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")
            )
            addrs = {}
            for arm, host in (("direct", direct), ("relayed", natted)):
                proc = subprocess.Popen(
                    [
                        *lab.prefix(host),
                        *me,
                        "receiver",
                        host.ip,
                        peers,
                        "--sizes-mb",
                        *map(str, args.sizes_mb),
                        "--store",
                        str(tmp / f"held-{arm}"),
                    ]
                    + (["--relayed"] if arm == "relayed" else []),
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                )
                procs.append(proc)
                addrs[arm] = json.loads(_line(proc, "{", timeout=300))
            done = subprocess.run(
                [
                    *lab.prefix(src),
                    *me,
                    "sender",
                    src.ip,
                    peers,
                    json.dumps(addrs),
                    "--sizes-mb",
                    *map(str, args.sizes_mb),
                    "--group-kb",
                    str(args.group_kb),
                    "--push-seconds",
                    str(args.push_seconds),
                    "--boot-ns",
                    boot_host.ns,
                    "--boot-p2pd",
                    str(boot_p2pd),
                    "--store",
                    str(tmp / "fetched"),
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=3600,
            )
            if done.returncode != 0:
                raise RuntimeError(f"sender failed:\n{done.stderr[-3000:]}")
            return json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
            shutil.rmtree(tmp, ignore_errors=True)


def _ratio(direct: float | None, relayed: float | None) -> str:
    return f"{relayed / direct:.2f}x" if direct and relayed else "failed"


def summary_table(rates: dict[str, dict], sizes_mb: list[float], group_kb: int) -> str:
    """Every rate's direct and relayed figures and their ratio, as one markdown table."""
    rows = ["| uplinks | what | direct | relayed | relayed / direct |", "|---|---|---|---|---|"]
    for mbit, res in rates.items():
        d, r = res["direct"], res["relayed"]
        for mb in sizes_mb:
            a, b = d["fetch_s"][str(mb)], r["fetch_s"][str(mb)]
            rows.append(f"| {float(mbit):g} Mbit/s | fetch of a {mb:g} MB version | {a} s | {b} s | {_ratio(a, b)} |")
        a, b = d["groups_per_s"], r["groups_per_s"]
        rows.append(f"| {float(mbit):g} Mbit/s | {group_kb} KB groups pushed | {a}/s | {b}/s | {_ratio(a, b)} |")
    rows += [
        "",
        "| uplinks | bootstrap: MB over its link, direct / relayed arm | p2pd CPU s, direct / relayed arm |",
        "|---|---|---|",
    ]
    for mbit, res in rates.items():
        d, r = res["direct"], res["relayed"]
        rows.append(
            f"| {float(mbit):g} Mbit/s | {d['bootstrap_mb']} / {r['bootstrap_mb']} | "
            f"{d['bootstrap_cpu_s']} / {r['bootstrap_cpu_s']} |"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", nargs="?", default="bench", choices=["bench", "receiver", "sender"])
    ap.add_argument("ip", nargs="?")
    ap.add_argument("boot", nargs="?")
    ap.add_argument("targets", nargs="?")
    ap.add_argument("--relayed", action="store_true")
    ap.add_argument("--mbit", type=float, nargs="+", default=[20.0, 100.0])
    ap.add_argument(
        "--sizes-mb",
        type=float,
        nargs="+",
        default=[1.4, 20.0, 270.0],
        help="version sizes: tiny model fp32, Qwen3-0.6B r=16 adapter, SmolLM2-135M bf16",
    )
    ap.add_argument("--group-kb", type=int, default=32, help="bytes of one rollout group on the wire")
    ap.add_argument("--push-seconds", type=float, default=8.0)
    ap.add_argument("--boot-ns")
    ap.add_argument("--boot-p2pd", type=int)
    ap.add_argument("--store", help="(receiver, sender) the weight store's directory")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    if args.part == "receiver":
        asyncio.run(receiver(args.ip, args.boot, args.relayed, args.sizes_mb, args.store))
        return
    if args.part == "sender":
        asyncio.run(
            sender(
                args.ip,
                args.boot,
                json.loads(args.targets),
                args.sizes_mb,
                args.group_kb,
                args.push_seconds,
                args.boot_ns,
                args.boot_p2pd,
                args.store,
            )
        )
        return
    from benchlib.nat_lab import missing_for_nat_lab

    if (why := missing_for_nat_lab()) is not None:
        raise SystemExit(f"relay_cost: {why}")
    out = {"load_before": os.getloadavg()[0], "rates": {}}
    for mbit in args.mbit:
        res = one_rate(mbit, args)
        out["rates"][str(mbit)] = res
        d, r = res["direct"], res["relayed"]
        print(f"uplinks {mbit:g} Mbit/s:")
        for mb in args.sizes_mb:
            a, b = d["fetch_s"][str(mb)], r["fetch_s"][str(mb)]
            if a is None or b is None:
                print(f"  {mb:g} MB version: direct {a} s, relayed {b} s (failed: {d.get('errors')} {r.get('errors')})")
                continue
            print(f"  {mb:g} MB version: direct {a:.2f} s, relayed {b:.2f} s ({b / a:.2f}x)")
        print(f"  connections: direct {d['connection']}, relayed {r['connection']}")
        print(
            f"  {args.group_kb} KB groups: direct {d['groups_per_s']:.1f}/s, relayed {r['groups_per_s']:.1f}/s "
            f"({r['groups_per_s'] / d['groups_per_s']:.2f}x)"
        )
        print(
            f"  bootstrap: direct arm {d['bootstrap_mb']:.1f} MB / {d['bootstrap_cpu_s']:.2f} CPU s, relayed arm "
            f"{r['bootstrap_mb']:.1f} MB / {r['bootstrap_cpu_s']:.2f} CPU s"
        )
    out["load_after"] = os.getloadavg()[0]
    print(f"load average before {out['load_before']:.1f}, after {out['load_after']:.1f}")
    print(summary_table(out["rates"], args.sizes_mb, args.group_kb))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
