"""`swarmnode status` over a run of 10,000 peer records: generated, signed, stored in a real DHT.

A few real DHT nodes (each its own p2pd, in this process) make the run's DHT; a real learner member heartbeats in
it; N sampler records from throwaway keys (each signed by its key, for its shard key, as a node would store it;
health, versions and reachability varied) are stored at every DHT node through their ordinary store path. Then a
status client, as `swarmnode status` makes one, joins and reads: the default census (exact up to ~2,000 records,
else a sample of the shards) and `--exact` (every shard), timed each; and the text a person reads.

    python bench/status-scale/status_10k.py                      # 10,000 records, 4 DHT nodes
    python bench/status-scale/status_10k.py --records 2000 --repeats 3 --out bench/status-scale/results/2k
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import random
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
NET = ["network.nat_port_map=false", "network.auto_nat=false", "network.reachability=public",
       "network.host_maddrs=[/ip4/127.0.0.1/tcp/0]", "network.heartbeat_interval=120"]  # records may live 1440 s
LIFETIME_S = 1400.0  # the fakes' lifetime: generating and storing 10,000 takes minutes on a busy machine


def cfg(*sets: str):
    return load_config("tiny-cpu", [*NET, f"run_id={RUN}", *sets])


def generate(count: int, expiration: float, seed: int = 0) -> list:
    """`count` signed sampler records in a handful of kinds (versions, lags, relayed / client-only, throughput)."""
    rng = random.Random(seed)
    out = []
    kinds = [(v, reach) for v in (41, 40, 38, 30) for reach in ("public", "public", "relayed", "client-only")]
    per_kind = -(-count // len(kinds))
    for version, reach in kinds:
        n = min(per_kind, count - len(out))
        health = {"reachability": reach, "tokens_per_s": round(rng.uniform(50, 400), 1),
                  "rollouts_per_s": round(rng.uniform(0.1, 2.0), 3), "uptime": 600.0, "version": version}
        out += fake_peer_records(RUN, n, expiration, role="sampler", version=version, pad=False, health=health)
    return out


async def snapshot(member, exact: bool) -> tuple[float, dict]:
    t0 = time.perf_counter()
    doc = await read_status(member, exact)
    return time.perf_counter() - t0, doc


async def cli_status(boot: str, learner: str) -> tuple[float, float, dict]:
    """`swarmnode status --json` as a person runs it (a fresh process: no record verified before); (wall seconds,
    CPU seconds of the child, its document)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "swarmnode", "status", "--json", "--config", "tiny-cpu",
        "--set", f"run_id={RUN}", "--set", f"trust.learner_keys=[{learner}]", "--initial-peers", boot,
        "--set", "network.heartbeat_interval=120",  # else its validator refuses the fakes' long lifetimes
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
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
    proc = await asyncio.create_subprocess_exec(sys.executable, "-P", "-c",
                                                "import swarmnode.cli, swarmnode.observe.status, hivemind")
    await proc.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t0, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


async def main_async(args) -> dict:
    nodes: list[SwarmDHT] = []
    learner = member = None
    try:
        first = await SwarmDHT.create(cfg(), Identity.generate())
        nodes.append(first)
        boot = str((await first.p2p.get_visible_maddrs())[0])
        joined = cfg(f"network.initial_peers=[{boot}]")
        for _ in range(args.dht_nodes - 1):
            nodes.append(await SwarmDHT.create(joined, Identity.generate()))
        learner_id = Identity.generate()
        learner = Membership(cfg(f"network.initial_peers=[{boot}]", f"trust.learner_keys=[{learner_id.peer_id}]"),
                             learner_id, "learner")
        learner.update(version=41, health={"reachability": "public", "step": 400, "version": 41})
        await learner.start()
        t0 = time.perf_counter()
        expiration = record_lifetime(LIFETIME_S)
        records = generate(args.records, expiration)
        generated_s = time.perf_counter() - t0
        targets = {}
        for node in nodes:
            addr, _, peer_id = str((await node.p2p.get_visible_maddrs())[0]).rpartition("/p2p/")
            targets[peer_id] = addr
        t0 = time.perf_counter()
        accepted = await store_records(RUN, targets, records, expiration)
        stored_s = time.perf_counter() - t0
        print(f"{len(records)} records generated in {generated_s:.1f} s, stored at {len(targets)} DHT nodes in "
              f"{stored_s:.1f} s ({accepted} accepted)", file=sys.stderr)
        cli_s, cli_cpu_s, cli_doc = await cli_status(boot, learner_id.peer_id)  # first: no record verified yet
        import_s, import_cpu_s = await imports_only()
        member = client_member(cfg(f"network.initial_peers=[{boot}]", f"trust.learner_keys=[{learner_id.peer_id}]"))
        t0 = time.perf_counter()
        await member.start()
        join_s = time.perf_counter() - t0
        census_s, exact_s, census_cpu, exact_cpu, doc, exact_doc = [], [], [], [], None, None
        for _ in range(args.repeats):  # in this process, where the DHT nodes run too (their CPU counts here)
            cpu = time.process_time()
            seconds, doc = await snapshot(member, exact=False)
            census_s.append(seconds)
            census_cpu.append(time.process_time() - cpu)
            cpu = time.process_time()
            seconds, exact_doc = await snapshot(member, exact=True)
            exact_s.append(seconds)
            exact_cpu.append(time.process_time() - cpu)
        text = format_status(doc)
        return {
            "cli_s": round(cli_s, 2), "cli_cpu_s": round(cli_cpu_s, 2), "cli_count": cli_doc.get("count"),
            "import_s": round(import_s, 2), "import_cpu_s": round(import_cpu_s, 2),
            "cli_census": cli_doc.get("census"),
            "records": args.records, "dht_nodes": args.dht_nodes, "accepted": accepted,
            "generated_s": round(generated_s, 2), "stored_s": round(stored_s, 2), "client_join_s": round(join_s, 2),
            "census_s": [round(s, 3) for s in census_s], "exact_s": [round(s, 3) for s in exact_s],
            "census_cpu_s": [round(s, 3) for s in census_cpu], "exact_cpu_s": [round(s, 3) for s in exact_cpu],
            "census": doc.get("census"), "count": doc["count"], "exact_count": exact_doc["count"],
            "exact_roles": exact_doc["roles"], "roles": doc["roles"], "peers_in_doc": len(doc["peers"]),
            "exact_peers_in_doc": len(exact_doc["peers"]), "text_lines": len(text.splitlines()), "text": text,
            "load": os.getloadavg(),
        }
    finally:
        for thing in (member, learner):
            if thing is not None:
                with contextlib.suppress(Exception):
                    await thing.stop()
        for node in reversed(nodes):
            with contextlib.suppress(Exception):
                await node.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--dht-nodes", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=results_dir(__file__) / "status_10k")
    args = ap.parse_args()
    load_before = os.getloadavg()
    doc = asyncio.run(main_async(args))
    doc["load_before"] = load_before
    census = doc["census"] or {}
    summary = (f"status over {doc['records']:,} records at {doc['dht_nodes']} DHT nodes: census "
               f"{statistics.median(doc['census_s']):.2f} s median ({census.get('records_read', 0):,} records of "
               f"{census.get('shards_read')} / {census.get('shards')} shards; count {doc['count']:,}, exact "
               f"{doc['exact_count']:,}), --exact {statistics.median(doc['exact_s']):.2f} s median; the text "
               f"{doc['text_lines']} lines; `swarmnode status --json` in a fresh process {doc['cli_s']:.1f} s "
               f"({doc['cli_cpu_s']:.1f} CPU s; its imports alone {doc['import_s']:.1f} s, "
               f"{doc['import_cpu_s']:.1f} CPU s); load {doc['load'][0]:.1f}")
    print(summary)
    print(doc["text"])
    write_results(args.out, doc, summary + "\n\n```\n" + doc["text"] + "\n```\n")


if __name__ == "__main__":
    main()
