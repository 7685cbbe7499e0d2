"""One lab process holding several nodes of a scale-lab run (`bench/scale/lab.py` starts these).

    python -P bench/scale/host.py SPEC.json

The spec names the config, its `--set` overrides, the initial peers and this process's nodes (name, role,
identity path, data dir). Each node is what `swarmnode join` (or `swarmnode bootstrap`) runs: `run_node` /
`run_bootstrap` with its own identity, its own p2pd and its own DHT node, all on this process's event loop (a
process that imports hivemind and torch holds ~360 MB; its nodes share that). Lab additions, none of them in
`join`: the byte counters (`counters.install`), a handle on each role (to read its store and counters), and a
sampler that writes one JSON line per node to `<spec>.jsonl` every `sample_s`, plus a line per version a node
first holds; optionally versions in smaller chunks (`chunk_bytes`). Lab mode's pacing (`pacing.py`): with
`gate_dir`, p2pd starts take a lab-wide slot (`gate_slots` at once); with `groups_per_s`, this process's samplers
share one generation budget. SIGTERM stops every node cleanly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's swarmnode, not an installed one
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # bench/, for `scale`

from scale import counters  # noqa: E402
from scale.pacing import SharedPace, StartGate  # noqa: E402
from scale.procstat import process_tree_stats  # noqa: E402

counters.install()

from swarmnode.config import load_config  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.node.bootstrap import run_bootstrap  # noqa: E402
from swarmnode.node.join import run_node  # noqa: E402
from swarmnode.node.roles import learner_role, sampler_role  # noqa: E402
from swarmnode.node.roles.learner_role import LearnerRole  # noqa: E402
from swarmnode.node.roles.sampler_role import SamplerRole  # noqa: E402
from swarmnode.swarm import dht, reachability  # noqa: E402
from swarmnode.swarm.membership import Membership  # noqa: E402
from swarmnode.swarm.weights import WeightStore  # noqa: E402

ROLES: dict[str, Any] = {}  # peer id -> the role object run_node built (LearnerRole or SamplerRole)
MODEL_LOCK = threading.Lock()
MEMBERS: dict[str, Membership] = {}  # peer id -> its Membership (the bootstrap's too)
PACING: dict[str, Any] = {}  # "gate": the StartGate, "pace": the SharedPace (lab mode, when the spec asks)


def _one_at_a_time(module: Any, name: str) -> None:
    """Serialise `module.name` over this process's threads: building a model on the meta device (`with
    torch.device("meta")`) is process-wide in torch, so two nodes building at once in their compute threads get
    each other's meta tensors ("Cannot copy out of meta tensor")."""
    fn = getattr(module, name)

    def serial(*args, **kwargs):
        with MODEL_LOCK:
            return fn(*args, **kwargs)

    setattr(module, name, serial)


def _capture_roles() -> None:
    """Keep a handle on each role `run_node` builds and each Membership that starts (to read their counters);
    build models one at a time."""
    for name in ("build_engine", "meta_state_dict"):
        _one_at_a_time(sampler_role, name)
    _one_at_a_time(learner_role, "load_model")
    for cls in (SamplerRole, LearnerRole):
        create = cls.create.__func__

        async def captured(klass, cfg, identity, member, emit, _create=create):
            role = await _create(klass, cfg, identity, member, emit)
            ROLES[identity.peer_id] = role
            if isinstance(role, SamplerRole) and "pace" in PACING:
                _share_pace(role, PACING["pace"])
            return role

        cls.create = classmethod(captured)
    start = Membership.start

    async def started(self):
        MEMBERS[self.identity.peer_id] = self
        return await start(self)

    Membership.start = started


def _share_pace(role: SamplerRole, pace: SharedPace) -> None:
    """The sampler's batches (`loop.step` on its compute thread) in the process's shared budget."""
    run = role.compute.run

    async def paced(fn, *args, **kwargs):
        if fn != role.loop.step:
            return await run(fn, *args, **kwargs)
        groups = args[0] if args and isinstance(args[0], int) else role.loop.sc.prompts_per_batch
        return await pace.run(groups, lambda: run(fn, *args, **kwargs))

    role.compute.run = paced


def use_pacing(spec: dict) -> None:
    """Lab mode: p2pd starts through the lab-wide gate, the samplers' generation in one budget (as the spec
    asks)."""
    if spec.get("gate_dir"):
        gate = PACING["gate"] = StartGate(Path(spec["gate_dir"]), int(spec.get("gate_slots", 2)))
        dht.start_p2p = gate.gated(dht.start_p2p)
        reachability.start_p2p = gate.gated(reachability.start_p2p)
    if spec.get("groups_per_s"):
        PACING["pace"] = SharedPace(float(spec["groups_per_s"]))


def sampler_state(node: SamplerRole) -> str:
    """What a sampler is doing now, as its role knows it: its health's pause reason ("too stale": fetching a
    newer version before it generates; "no learner"), "undelivered" (its delivery guard stopped it: nobody took
    its last groups), "credit" (waiting for a learner's invitation) or "generating"."""
    if node.health.paused:
        return str(node.health.paused).split(":")[0]  # "undelivered: <why>" -> "undelivered"
    if node.guard.stopped:
        return "undelivered"
    return "credit" if node.self_record.extra.get("waiting_for") == "credit" else "generating"


def node_row(name: str, role: str, peer: str, t0: float) -> dict[str, Any]:
    """One node's counters now."""
    by_handle = counters.snapshot(peer)
    ctl_in, ctl_out = counters.control_bytes(by_handle)
    row: dict[str, Any] = {
        "ev": "node",
        "t": time.time(),
        "name": name,
        "role": role,
        "peer": peer,
        "ctl_in": ctl_in,
        "ctl_out": ctl_out,
        "unary_in": sum(v[0] for v in by_handle.values()),
        "unary_out": sum(v[1] for v in by_handle.values()),
        "handles": by_handle,
    }
    member = MEMBERS.get(peer)
    if member is not None and member.ready_s is not None:
        row["join_s"] = round(member.ready_s, 3)
    node = ROLES.get(peer)
    if node is None:
        return row
    row["served"] = node.server.served_bytes
    row["versions"] = versions = node.store.versions()
    if versions and (manifest := node.store.manifest(versions[-1])) is not None:
        row["version_bytes"] = manifest.total_bytes
    if isinstance(node, SamplerRole):
        lat = sorted(node.sender.latencies)
        row["shards_read"] = node.peers.window.shards_read  # the sample's shard reads so far (ShardWindow)
        row.update(
            sent=node.loop.groups_sent,
            acked=node.sender.delivered,
            dropped=node.sender.dropped + node.sender.unrouted,
            ack_p50=lat[len(lat) // 2] if lat else None,
            ack_p99=lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else None,
            state=sampler_state(node),
            seed_chunks=dict(node.puller.seed_chunks),
        )  # the learner's chunks: asked, of them while unheard
    else:
        stats = node.learner.buffer.stats()["counters"]
        row.update(
            steps=node.learner.step_count,
            version=node.learner.version,
            accepted=node.receiver.accepted,
            statuses=dict(node.receiver.statuses),
            rejected=dict(node.learner.rejected),
            idle_s=node.idle_seconds,
            buffer=stats,
            passed_by=dict(node.learner.verifier.passed),
            clean_by=dict(node.learner.verifier.clean),
        )
    return row


async def watch(spec: dict, out, stop: asyncio.Event) -> None:
    """Every 0.5 s note the versions each node newly holds; every `sample_s` a row per node and one for the
    process."""
    t0, seen, next_row = time.time(), {}, 0.0
    while not stop.is_set():
        now = time.time()
        for node in spec["nodes"]:
            peer = node["peer"]
            role = ROLES.get(peer)
            if role is None:
                continue
            for v in role.store.versions():
                if (peer, v) not in seen:
                    seen[peer, v] = now
                    out.write(
                        json.dumps(
                            {"ev": "have", "t": now, "name": node["name"], "peer": peer, "role": node["role"], "v": v}
                        )
                        + "\n"
                    )
        if now >= next_row:
            next_row = now + spec["sample_s"]
            for node in spec["nodes"]:
                row = node_row(node["name"], node["role"], node["peer"], t0)
                if node["role"] == "bootstrap" and (member := MEMBERS.get(node["peer"])) and member.started:
                    try:
                        row["connections"] = len(await member.dht.p2p.list_peers())
                    except Exception:
                        pass
                out.write(json.dumps(row) + "\n")
            gate, pace = PACING.get("gate"), PACING.get("pace")
            paced = {"gate_wait_s": round(gate.waited_s, 2), "gate_starts": gate.starts} if gate else {}
            if pace:
                paced["paced_groups"] = pace.groups
            out.write(
                json.dumps({"ev": "proc", "t": now, "host": spec["name"], **process_tree_stats(os.getpid()), **paced})
                + "\n"
            )
        out.flush()
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except TimeoutError:
            pass


async def run_one(spec: dict, node: dict, stop: asyncio.Event, log) -> None:
    """One node of this process, until `stop`."""
    sets = [*spec["sets"], f"data_dir={node['data_dir']}", f"network.identity_path={node['key']}"]
    if spec.get("initial_peers"):
        sets.append(f"network.initial_peers={json.dumps(spec['initial_peers'])}")
    if node["role"] != "bootstrap":
        sets.append(f"role={node['role']}")
    if node.get("port") or node["role"] == "bootstrap":  # a port of its own: its uplink is capped by it
        sets.append(f'network.host_maddrs=["/ip4/127.0.0.1/tcp/{node.get("port", 0)}"]')
    cfg = load_config(spec["config"], sets)
    identity = Identity.load_or_create(node["key"])

    def emit(line: str) -> None:
        log.write(f"{time.time():.3f} {node['name']} {line}\n")
        log.flush()

    try:
        if node["role"] == "bootstrap":
            await run_bootstrap(cfg, identity, stop, as_json=False, log_interval=spec["sample_s"], emit=emit)
        else:
            await run_node(cfg, identity, stop, emit=emit)
    except Exception as exc:  # one node failing is a result, not the end of the process's other nodes
        emit(f"FAILED {type(exc).__name__}: {exc}")
        logging.getLogger("scale.host").exception("node %s failed", node["name"])


def preload() -> None:
    """Import in this thread what the nodes' compute threads would import lazily, all at once (transformers' lazy
    module is not safe against concurrent first imports: "cannot import name 'AutoConfig'")."""
    import transformers
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # noqa: F401

    for name in (
        "Qwen2Tokenizer",
        "Qwen2Config",
        "Qwen2ForCausalLM",
        "Qwen3Config",
        "AutoTokenizer",
        "AutoModelForCausalLM",
        "AutoConfig",
        "get_scheduler",
    ):
        getattr(transformers, name)
    import swarmnode.model.logprobs  # noqa: F401
    import swarmnode.sampler.engines  # noqa: F401


def use_chunk_bytes(chunk_bytes: int | None) -> None:
    """Lab mode: versions cut into `chunk_bytes` chunks instead of 4 MiB (a 1.4 MB tiny version is one 4 MiB
    chunk, which no rarest-first schedule can spread; in 256 KiB chunks it is six, as a 20 MB adapter is five)."""
    if chunk_bytes:
        WeightStore.__init__.__kwdefaults__["chunk_bytes"] = int(chunk_bytes)


async def main(spec_path: Path) -> None:
    spec = json.loads(spec_path.read_text())
    preload()
    use_chunk_bytes(spec.get("chunk_bytes"))
    use_pacing(spec)
    _capture_roles()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with open(spec_path.with_suffix(".jsonl"), "a") as out, open(spec_path.with_suffix(".log"), "a") as log:
        log.write(f"{time.time():.3f} {spec['name']} host imported\n")  # the lab starts the next host now
        log.flush()
        watcher = asyncio.create_task(watch(spec, out, stop))
        nodes = []
        for node in spec["nodes"]:
            nodes.append(asyncio.create_task(run_one(spec, node, stop, log)))
            await asyncio.sleep(spec.get("stagger_s", 0.0))
        await stop.wait()
        await asyncio.wait(nodes, timeout=60)
        watcher.cancel()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(main(Path(sys.argv[1])))
