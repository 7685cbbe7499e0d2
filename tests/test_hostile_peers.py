"""A hostile peer against a live learner process (real bootstrap, learner and sampler on 127.0.0.1, the attacker a
real p2pd in this process): a signed group with absurd log-probs and a frame of 8 M empty arrays are refused
without the learner's memory growing, extra concurrent streams are answered "busy" before anything is read, a
ban acts on stream open, the learner goes on training the honest sampler's groups, and `status` shows the
attacker in an `invalid_data` alert."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import msgpack
import pytest
from hivemind.p2p import P2P, PeerID
from restart_helpers import start_learner_and_sampler, steps, wait_rows
from swarm_helpers import LocalSwarm

from swarmnode.identity import Identity
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.swarm.frames import read_control, write_frame
from swarmnode.swarm.rollout_push import push_protocol

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

MAX_STREAMS = 4  # RolloutReceiver's default per-peer cap


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def attack(tmp_path: Path, run_id: str, learner_id: str, learner_addr: str) -> tuple[dict, str]:
    attacker = Identity.generate()
    key = tmp_path / "attacker.key"
    key.write_bytes(attacker.libp2p_key_bytes())
    p2p = await P2P.create(
        identity_path=str(key),
        host_maddrs=["/ip4/127.0.0.1/tcp/0"],
        nat_port_map=False,
        auto_nat=False,
        check_if_identity_free=False,
        initial_peers=[f"{learner_addr}/p2p/{learner_id}"],
    )
    learner = PeerID.from_base58(learner_id)
    out: dict[str, list[str]] = {}
    try:

        async def push(frame: bytes) -> str:
            _, reader, writer = await p2p.call_binary_stream_handler(learner, push_protocol(run_id))
            try:
                await write_frame(writer, frame)
                return (await asyncio.wait_for(read_control(reader), 60))["status"]
            finally:
                writer.close()

        absurd = RolloutGroup.create(
            identity=attacker,
            run_id=run_id,
            prompt_id="add:1:2",
            prompt_tokens=[5, 6, 7],
            completions=[[5, 6]] * 8,
            logprobs=[[-1e30, -1e30]] * 8,
            temperature=1.0,
            rewards=[float(i % 2) for i in range(8)],
            policy_version=0,
            lineage=learner_id,
        )
        out["absurd"] = [await push(absurd.encode())]
        empty_arrays = msgpack.packb({"completions": [[]] * (8 * 1024 * 1024 - 64)})
        out["8M empty arrays"] = [await push(empty_arrays)]
        # more concurrent streams than allowed: the extra ones are answered at once, before any read. Which ones are
        # extra is the order the learner's handler sees them in, which need not be the order they were opened in
        streams = [await p2p.call_binary_stream_handler(learner, push_protocol(run_id)) for _ in range(MAX_STREAMS + 2)]
        reads = [asyncio.ensure_future(read_control(r)) for _, r, _ in streams]
        answered = []
        for read in asyncio.as_completed(reads, timeout=30):
            answered.append((await read)["status"])
            if len(answered) == 2:
                break
        out["extra streams"] = answered
        for read in reads:
            read.cancel()
        for _, _, w in streams:
            w.close()
        out["third strike"] = [await push(b"\xc1 not msgpack")]
        _, reader, writer = await p2p.call_binary_stream_handler(learner, push_protocol(run_id))
        out["after ban"] = [(await asyncio.wait_for(read_control(reader), 30))["status"]]  # before sending a byte
        writer.close()
    finally:
        with contextlib.suppress(Exception):
            await p2p.shutdown()
    return out, attacker.peer_id


@pytest.mark.slow  # a bootstrap, a learner and a sampler: ~1 min on 2 cores
def test_a_hostile_peer_costs_only_itself(tmp_path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    with LocalSwarm(tmp_path) as swarm:
        learner = start_learner_and_sampler(swarm, tmp_path)
        learner_id = learner.ready_fields()["peer_id"]
        wait_rows(steps_file, lambda rows: len(rows) >= 3, 180, "3 learner steps")
        record = next(p for p in swarm.status()["peers"] if p["peer_id"] == learner_id)
        rss_before = peak_rss_mb(learner.pid)
        statuses, attacker = asyncio.run(attack(tmp_path, swarm.run_id, learner_id, record["addrs"][0]))
        assert statuses == {
            "absurd": ["invalid"],
            "8M empty arrays": ["invalid"],
            "extra streams": ["busy", "busy"],
            "third strike": ["invalid"],
            "after ban": ["banned"],
        }, statuses
        grown = peak_rss_mb(learner.pid) - rss_before
        assert grown < 100, f"the learner's peak memory grew {grown:.0f} MB (decoding the whole frame: ~1 GB)"
        seen = len(steps(steps_file))
        wait_rows(steps_file, lambda rows: len(rows) >= seen + 5, 180, "5 honest steps after the attack")
        alerts = swarm.status()["alerts"]
        assert any(a["kind"] == "invalid_data" and a["peer_id"] == attacker for a in alerts), alerts
        err = learner.stderr()  # refused for the right reasons, logged
        assert "plausible floor" in err and "exceeds max_array_len" in err, err[-3000:]
