"""`swarmnode status` over a run of 10,000 peer records: generated, signed, stored in a real DHT.

A few real DHT nodes (each its own p2pd, in this process) make the run's DHT; a real learner member heartbeats in
it; N sampler records from throwaway keys (each signed by its key, for its shard key, as a node would store it;
health, versions and reachability varied) are stored at every DHT node through their ordinary store path. Then a
status client, as `swarmnode status` makes one, joins and reads: the default census (exact up to ~2,000 records,
else a sample of the shards) and `--exact` (every shard), timed each (wall and CPU seconds); and the text a person
reads. A baseline run of `--baseline` records (128), in a DHT of its own as many nodes (a DHT node keeps the
records of its own run only), is read the same way in turns with the large one, so the ratios large / baseline
(wall and CPU) compare the two under one load.

    python bench/status-scale/status_10k.py                      # 10,000 records against 128, 3 DHT nodes
    python bench/status-scale/status_10k.py --records 2000 --repeats 3 --out bench/status-scale/results/2k
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import results_dir, use_test_helpers, write_results  # noqa: E402

use_test_helpers()
from flood_helpers import fake_peer_records, record_lifetime, store_records  # noqa: E402

from swarmnode.config import load_config  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.observe.status import client_member, format_status, read_status  # noqa: E402
from swarmnode.swarm.dht import SwarmDHT  # noqa: E402
from swarmnode.swarm.membership import Membership  # noqa: E402

RUN = "status-scale"
NET = [
    "network.nat_port_map=false",
    "network.auto_nat=false",
    "network.reachability=public",
    "network.host_maddrs=[/ip4/127.0.0.1/tcp/0]",
    "network.heartbeat_interval=120",
]  # records may live 1440 s
LIFETIME_S = 1400.0  # the fakes' lifetime: generating and storing 10,000 takes minutes on a busy machine


BASE_RUN = f"{RUN}-base"  # the baseline's run, in a DHT of its own


def cfg(*sets: str, run: str = RUN):
    return load_config("tiny-cpu", [*NET, f"run_id={run}", *sets])


def generate(count: int, expiration: float, seed: int = 0, run: str = RUN) -> list:
    """`count` signed sampler records in a handful of kinds (versions, lags, relayed / client-only, throughput)."""
    rng = random.Random(seed)
    out = []
    kinds = [(v, reach) for v in (41, 40, 38, 30) for reach in ("public", "public", "relayed", "client-only")]
    per_kind = -(-count // len(kinds))
    for version, reach in kinds:
        n = min(per_kind, count - len(out))
        health = {
            "reachability": reach,
            "tokens_per_s": round(rng.uniform(50, 400), 1),
            "rollouts_per_s": round(rng.uniform(0.1, 2.0), 3),
            "uptime": 600.0,
            "version": version,
        }
        out += fake_peer_records(run, n, expiration, role="sampler", version=version, pad=False, health=health)
    return out


async def snapshot(member, exact: bool) -> tuple[float, float, dict]:
    """One snapshot in this process: (wall s, CPU s of this process: the client and the DHT nodes serving it, not
    their p2pd daemons), the document."""
    t0, cpu = time.perf_counter(), time.process_time()
    doc = await read_status(member, exact)
    return time.perf_counter() - t0, time.process_time() - cpu, doc


async def cli_status(boot: str, learner: str, run: str = RUN) -> tuple[float, float, dict]:
    """`swarmnode status --json` as a person runs it (a fresh process: no record verified before); (wall seconds,
    CPU seconds of the child, its document)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",
        "-m",
        "swarmnode",
        "status",
        "--json",
        "--config",
        "tiny-cpu",
        "--set",
        f"run_id={run}",
        "--set",
        f"trust.learner_keys=[{learner}]",
        "--initial-peers",
        boot,
        "--set",
        "network.heartbeat_interval=120",  # else its validator refuses the fakes' long lifetimes
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        doc = json.loads(out)
    except ValueError:
        print(f"status failed (rc {proc.returncode}): {err.decode()[-500:]}", file=sys.stderr)
        doc = {}
    return wall, cpu, doc


async def imports_only() -> tuple[float, float]:
    """The baseline of `cli_status`: a fresh process that only imports what `status` imports; (wall, CPU s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-c", "import swarmnode.cli, swarmnode.observe.status, hivemind"
    )
    await proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


class Arm:
    """One run read by the bench: its learner (a real member), its generated records and a status client."""

    def __init__(self, run: str, records: int) -> None:
        self.run, self.records = run, records
        self.nodes: list[SwarmDHT] = []
        self.boot = ""
        self.targets: dict[str, str] = {}  # the DHT nodes: peer id -> address
        self.learner_id = Identity.generate()
        self.learner = self.member = None
        self.times: dict[str, list[tuple[float, float]]] = {"census": [], "exact": []}  # (wall s, CPU s)
        self.docs: dict[str, dict] = {}

    def cfg(self):
        return cfg(
            f"network.initial_peers=[{self.boot}]", f"trust.learner_keys=[{self.learner_id.peer_id}]", run=self.run
        )

    async def start_dht(self, count: int) -> None:
        """`count` DHT nodes of this run, then its learner."""
        first = await SwarmDHT.create(cfg(run=self.run), Identity.generate())
        self.nodes.append(first)
        self.boot = str((await first.p2p.get_visible_maddrs())[0])
        for _ in range(count - 1):
            self.nodes.append(
                await SwarmDHT.create(cfg(f"network.initial_peers=[{self.boot}]", run=self.run), Identity.generate())
            )
        for node in self.nodes:
            addr, _, peer_id = str((await node.p2p.get_visible_maddrs())[0]).rpartition("/p2p/")
            self.targets[peer_id] = addr
        self.learner = Membership(self.cfg(), self.learner_id, "learner")
        self.learner.update(version=41, health={"reachability": "public", "step": 400, "version": 41})
        await self.learner.start()

    async def read(self) -> None:
        for kind in ("census", "exact"):
            wall, cpu, self.docs[kind] = await snapshot(self.member, exact=kind == "exact")
            self.times[kind].append((wall, cpu))

    def medians(self, kind: str) -> tuple[float, float]:
        rows = self.times[kind]
        return statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows)

    async def stop(self) -> None:
        for thing in (self.member, self.learner):
            if thing is not None:
                with contextlib.suppress(Exception):
                    await thing.stop()
        for node in reversed(self.nodes):
            with contextlib.suppress(Exception):
                await node.shutdown()


def ratio(big: float, base: float) -> float | None:
    return round(big / base, 2) if base > 0 else None


async def main_async(args) -> dict:
    big, base = Arm(RUN, args.records), Arm(BASE_RUN, args.baseline)
    try:
        for arm in (big, base):
            await arm.start_dht(args.dht_nodes)
        t0 = time.perf_counter()
        expiration = record_lifetime(LIFETIME_S)
        records = {arm.run: generate(arm.records, expiration, run=arm.run) for arm in (big, base)}
        generated_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        accepted = {
            arm.run: await store_records(arm.run, arm.targets, records[arm.run], expiration) for arm in (big, base)
        }
        stored_s = time.perf_counter() - t0
        print(
            f"{args.records} + {args.baseline} records generated in {generated_s:.1f} s, stored at "
            f"{args.dht_nodes} DHT nodes each in {stored_s:.1f} s ({accepted} accepted)",
            file=sys.stderr,
        )
        cli = {}
        for arm in (base, big):  # first: no record verified yet (a fresh process, as a person runs it)
            cli[arm.run] = await cli_status(arm.boot, arm.learner_id.peer_id, arm.run)
        import_s, import_cpu_s = await imports_only()
        t0 = time.perf_counter()
        for arm in (big, base):
            arm.member = client_member(arm.cfg())
            await arm.member.start()
        join_s = time.perf_counter() - t0
        for _ in range(args.repeats):  # in turns, so both arms read under the same load
            for arm in (base, big):
                await arm.read()
        doc, exact_doc = big.docs["census"], big.docs["exact"]
        text = format_status(doc)
        (cli_s, cli_cpu_s, cli_doc), (base_cli_s, base_cli_cpu_s, _) = cli[RUN], cli[BASE_RUN]
        figures = {}
        for kind in ("census", "exact"):
            (bw, bc), (sw, sc) = big.medians(kind), base.medians(kind)
            figures[kind] = {
                "wall_s": round(bw, 3),
                "cpu_s": round(bc, 3),
                "base_wall_s": round(sw, 3),
                "base_cpu_s": round(sc, 3),
                "wall_ratio": ratio(bw, sw),
                "cpu_ratio": ratio(bc, sc),
            }
        figures["cli"] = {
            "wall_s": round(cli_s, 2),
            "cpu_s": round(cli_cpu_s, 2),
            "base_wall_s": round(base_cli_s, 2),
            "base_cpu_s": round(base_cli_cpu_s, 2),
            "wall_ratio": ratio(cli_s, base_cli_s),
            "cpu_ratio": ratio(cli_cpu_s, base_cli_cpu_s),
        }
        return {
            "figures": figures,
            "baseline_records": args.baseline,
            "cli_s": round(cli_s, 2),
            "cli_cpu_s": round(cli_cpu_s, 2),
            "cli_count": cli_doc.get("count"),
            "import_s": round(import_s, 2),
            "import_cpu_s": round(import_cpu_s, 2),
            "cli_census": cli_doc.get("census"),
            "records": args.records,
            "dht_nodes": args.dht_nodes,
            "accepted": accepted,
            "generated_s": round(generated_s, 2),
            "stored_s": round(stored_s, 2),
            "client_join_s": round(join_s, 2),
            "census_s": [round(w, 3) for w, _ in big.times["census"]],
            "exact_s": [round(w, 3) for w, _ in big.times["exact"]],
            "census_cpu_s": [round(c, 3) for _, c in big.times["census"]],
            "exact_cpu_s": [round(c, 3) for _, c in big.times["exact"]],
            "base_census_s": [round(w, 3) for w, _ in base.times["census"]],
            "base_census_cpu_s": [round(c, 3) for _, c in base.times["census"]],
            "base_count": base.docs["census"]["count"],
            "census": doc.get("census"),
            "count": doc["count"],
            "exact_count": exact_doc["count"],
            "exact_roles": exact_doc["roles"],
            "roles": doc["roles"],
            "peers_in_doc": len(doc["peers"]),
            "exact_peers_in_doc": len(exact_doc["peers"]),
            "text_lines": len(text.splitlines()),
            "text": text,
            "load": os.getloadavg(),
        }
    finally:
        for arm in (big, base):
            await arm.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--dht-nodes", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", type=int, default=128, help="records of the baseline run read in turns with it")
    ap.add_argument("--out", type=Path, default=results_dir(__file__) / "status_10k")
    args = ap.parse_args()
    load_before = os.getloadavg()
    doc = asyncio.run(main_async(args))
    doc["load_before"] = load_before
    census, fig = doc["census"] or {}, doc["figures"]
    arms = "; ".join(
        f"{kind} {f['wall_s']:.2f} s wall, {f['cpu_s']:.2f} CPU s ({f['wall_ratio']}x / {f['cpu_ratio']}x "
        f"the {doc['baseline_records']}-record run's {f['base_wall_s']:.2f} s / {f['base_cpu_s']:.2f} s)"
        for kind, f in fig.items()
    )
    summary = (
        f"status over {doc['records']:,} records at {doc['dht_nodes']} DHT nodes (medians of "
        f"{len(doc['census_s'])}): {arms}. The census read {census.get('records_read', 0):,} records of "
        f"{census.get('shards_read')} / {census.get('shards')} shards; count {doc['count']:,}, exact "
        f"{doc['exact_count']:,}; the text {doc['text_lines']} lines; cli = `swarmnode status --json` in a "
        f"fresh process (its imports alone {doc['import_s']:.1f} s, {doc['import_cpu_s']:.1f} CPU s); load "
        f"{doc['load_before'][0]:.1f} before, {doc['load'][0]:.1f} after"
    )
    print(summary)
    print(doc["text"])
    write_results(args.out, doc, summary + "\n\n```\n" + doc["text"] + "\n```\n")


if __name__ == "__main__":
    main()
