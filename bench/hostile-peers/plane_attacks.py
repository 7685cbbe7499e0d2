"""The weight-plane and membership attacks of issue #40, for fuzz_learner.py: each runs against the live swarm for
`seconds` (or until its work is done) and returns its counts; each counts the hostile messages it sent.

- `slot_flood`: throwaway keys hold the weight-server streams of the learner and the honest sampler, never idle
  (tests/slot_flood_peer.py, its own process); `newcomer_fetch` times new samplers' first versions
  (`newcomer_fetch_apart`: in a process of their own).
- `dht_flood`: 2,000 throwaway-key learner records stored at every member (claiming version 1,000,000).
- `stalling_holder`: a live peer advertising a sampler record with the learner's versions, answering `have` with
  every chunk and stalling on every chunk request (the honest sampler may pick it: it is alive).
- `self_declared_learner`: a throwaway key publishing a learner record (version 1,000,000) whose health names the
  honest sampler as a sender of invalid data, on every heartbeat.
- `old_version_liar`: real groups of the run's model with log-probs shifted +0.3 nats, claiming the newest
  version - 6 (tests/liar_peer.py).
- `shaped_liars`: one new key per lie of `tests/shaped_lies.family()` (issue #47: the cancelling +-2 nats on 48 % of
  the tokens, +-0.5 nats on 10-50 % of them, on the largest-advantage or the long completions), each pushing the
  honest sampler's newest groups with that lie told, claiming the version they were sampled at
  (`liar_peer.shaped_liars`).
- `patient_liar`: a key that pushes the honest sampler's groups unchanged until they are trained (earning clean
  checks, so a falling check rate), then lies (`liar_peer.patient_liar`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from hivemind.p2p import P2P, PeerID

from benchlib import ROOT
from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.protocol.codec import unpack
from swarmnode.protocol.peer import PeerRecord
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.frames import read_frame, write_frame
from swarmnode.swarm.weights import WeightFetcher, WeightStore, protocol_name
from swarmnode.swarm.weights.havemap import bitmap

sys.path.insert(0, str(ROOT / "tests"))
from flood_helpers import fake_peer_records, record_lifetime, store_records  # noqa: E402
from swarm_helpers import FAST_NET, LOOPBACK  # noqa: E402

FAKE_VERSION = 10**6


def member_cfg(run_id: str, initial_peer: str):
    return load_config(
        None,
        [
            *FAST_NET,
            f"run_id={run_id}",
            f"network.host_maddrs=[{LOOPBACK}]",
            "network.missed_beats_to_expire=8",
            f"network.initial_peers=[{initial_peer}]",
        ],
    )


def slot_flood(
    run_id: str,
    targets: list[str],
    tmp: Path,
    keys: int = 33,
    streams: int = 4,
    every: float = 2.0,
    op: str = "manifest",
) -> tuple[subprocess.Popen, Path]:
    """Start the flooder on every weight server of `targets` ("<addr>/p2p/<id>"): by default the never-idle
    strangers of issue #47, 33 keys x 4 streams asking for a manifest every 2 s (132 streams on each target, more
    than its 128 stranger slots). It inherits this process's CPU affinity; stop it with `stop_slot_flood`."""
    ready = tmp / "slot-flood.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "slot_flood_peer.py"),
            *[a for t in targets for a in ("--target", t)],
            "--run",
            run_id,
            "--keys",
            str(keys),
            "--streams",
            str(streams),
            "--every",
            str(every),
            "--op",
            op,
            "--ready",
            str(ready),
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "slot-flood.err").open("w"),
    )
    return proc, ready


async def newcomer_fetch(run_id: str, learner_id: str, holders: list[str], tmp: Path, tries: int = 3) -> list:
    """`tries` new samplers (each a fresh key and daemon, a stranger to every holder) fetch the newest version
    from `holders` ("<addr>/p2p/<id>", the designated learner among them): each one's seconds, None if it failed
    within 120 s."""
    out = []
    ids = [PeerID.from_base58(h.rpartition("/p2p/")[2]) for h in holders]
    for _i in range(tries):
        try:
            newcomer = await P2P.create(
                host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                initial_peers=holders,
                nat_port_map=False,
                startup_timeout=120,
                auto_nat=False,
            )
        except Exception:  # its daemon did not start (a loaded machine): not a fetch the holders refused
            continue
        where = tmp / f"newcomer-{newcomer.peer_id.to_base58()[-8:]}"
        fetcher = WeightFetcher(newcomer, WeightStore(where, run_id), [learner_id], layout=None)
        try:
            await asyncio.wait_for(fetcher.fetch(ids, -1), 120)
            out.append(round(fetcher.last_stats.seconds, 3))
        except Exception:
            out.append(None)
        finally:
            with contextlib.suppress(Exception):
                await newcomer.shutdown()
            shutil.rmtree(where, ignore_errors=True)
    return out


async def newcomer_fetch_apart(run_id: str, learner_id: str, holders: list[str], tmp: Path, tries: int = 3) -> list:
    """`newcomer_fetch` in a process of its own on every CPU (`newcomer.py`), so that the attacks running in this
    process do not slow the newcomers' own event loop: each newcomer's seconds, None where it failed."""
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("newcomer.py")),
        "--run",
        run_id,
        "--learner",
        learner_id,
        *[a for h in holders for a in ("--holder", h)],
        "--tmp",
        str(tmp),
        "--tries",
        str(tries),
    ]
    with (tmp / "newcomer.err").open("a") as err:
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE, stderr=err)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), 150 * tries + 60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return [None] * tries
    try:
        return json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [None] * tries


def wait_ready(proc: subprocess.Popen, ready: Path, timeout: float) -> None:
    """Until the flooder has tried every stream (RuntimeError if it exits or takes longer than `timeout`)."""
    deadline = time.monotonic() + timeout
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            err = (
                (ready.parent / "slot-flood.err").read_text()[-2000:]
                if (ready.parent / "slot-flood.err").exists()
                else ""
            )
            raise RuntimeError(f"the slot flooder did not start its streams (exit {proc.poll()}): {err}")
        time.sleep(0.5)


def stop_slot_flood(proc: subprocess.Popen, ready: Path) -> dict:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            import os

            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    lines = ready.read_text().splitlines() if ready.exists() else []
    counts = json.loads(lines[-1]) if lines else {}
    counts["messages"] = counts.get("opened", 0) + counts.get("refused", 0) + counts.get("haves", 0)
    return counts


async def dht_flood(run_id: str, targets: dict[str, str], count: int = 2000) -> dict:
    """`count` fake learner records stored at every target (peer id -> multiaddr)."""
    expiration = record_lifetime()
    records = fake_peer_records(run_id, count, expiration, version=FAKE_VERSION)
    accepted = await store_records(run_id, targets, records, expiration)
    return {"messages": count * len(targets), "records": count, "targets": len(targets), "accepted": accepted}


async def stalling_holder(run_id: str, initial_peer: str, learner_id: str, seconds: float) -> dict:
    """A live peer that advertises the learner's versions and stalls every chunk request (see the module doc)."""
    me = Identity.generate()
    dht = await SwarmDHT.create(member_cfg(run_id, initial_peer), me)
    counts = collections.Counter()
    chunks_of: dict[int, int] = {}
    probe = WeightFetcher(
        dht.p2p,
        WeightStore(Path(f"/tmp/stall-{me.peer_id[-8:]}"), run_id),
        [learner_id],
        layout=None,
        request_timeout=5,
    )

    async def handle(info, reader, writer) -> None:
        try:
            while (req := await read_frame(reader, 1 << 16)) is not None:
                req = unpack(req, 1 << 16)
                counts["requests"] += 1
                if req.get("op") == "have" and isinstance(req.get("version"), int) and req["version"] >= 0:
                    v = req["version"]
                    if v not in chunks_of:
                        with contextlib.suppress(Exception):
                            chunks_of[v] = len((await probe.fetch_manifest([PeerID.from_base58(learner_id)], v)).chunks)
                    n = chunks_of.get(v, 0)
                    await write_frame(writer, bitmap(range(n), n) + bytes((n + 7) // 8) if n else b"")
                    counts["haves_claimed"] += 1
                elif req.get("op") == "chunks":
                    counts["chunks_stalled"] += 1
                    await asyncio.sleep(3600)  # mid-answer: the fetcher must give up on us, not wait
                elif req.get("op") == "bye":
                    break
                else:
                    await write_frame(writer, b"")
        except (Exception, asyncio.CancelledError):  # a stalled answer is cancelled when the holder leaves
            pass
        finally:
            writer.close()

    await dht.p2p.add_binary_stream_handler(protocol_name(run_id), handle)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            newest = await dht.newest_version()
            version = newest[0] if newest else 0
            await dht.store_peer(
                PeerRecord.create(
                    me, role="sampler", version=version, versions=list(range(max(0, version - 8), version + 1))
                )
            )
            counts["records"] += 1
            await asyncio.sleep(1.0)
    finally:
        await dht.shutdown()
    return {"messages": counts["requests"] + counts["records"], **counts}


async def self_declared_learner(run_id: str, initial_peer: str, honest_sampler: str, seconds: float) -> dict:
    """A throwaway key's learner record, under the peers key and its own learner key, every second."""
    me = Identity.generate()
    dht = await SwarmDHT.create(member_cfg(run_id, initial_peer), me)
    sent = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            record = PeerRecord.create(
                me,
                role="learner",
                version=FAKE_VERSION,
                versions=[FAKE_VERSION],
                health={"invalid_peers": [honest_sampler]},
            )
            await dht.store_peer(record)
            await dht.store_learner(record)
            sent += 2
            await asyncio.sleep(1.0)
    finally:
        await dht.shutdown()
    return {"messages": sent, "peer_id": me.peer_id}


async def old_version_liar(
    run_id: str, learner_id: str, learner_addr: str, tmp: Path, lies: int = 40, behind: int = 6
) -> dict:
    """`lies` groups shifted +0.3 nats per token claiming (newest - `behind`); the acks' statuses."""
    from liar_peer import lie, lying_groups

    cfg = load_config("tiny-cpu", ["model.tiny.warm_start_steps=20"])
    liar = Identity.generate()
    groups = await asyncio.to_thread(lying_groups, cfg, run_id, liar, learner_id, lies, 0.3)
    statuses = await lie(tmp, run_id, learner_id, learner_addr, groups, liar, behind)
    return {"messages": lies, "peer_id": liar.peer_id, "statuses": dict(statuses)}


async def shaped_liars(run_id: str, learner: str, sampler: str, tmp: Path, per_kind: int = 4) -> dict:
    """Every lie of the shaped family from its own key (`per_kind` groups each); the acks' statuses per lie."""
    from liar_peer import shaped_liars as liars
    from shaped_lies import family

    kinds = ["cancelling"] + [k for k in family() if k != "cancelling"]
    result = await liars(tmp, run_id, learner, sampler, kinds, per_kind)
    return {"messages": sum(sum(r["statuses"].values()) for r in result.values()), "liars": result}


async def patient_liar(run_id: str, learner: str, sampler: str, tmp: Path, honest: int, lies: int, drained) -> dict:
    """A key honest for `honest` groups (until `drained(peer_id)` returns), then lying on `lies` (see the doc)."""
    from liar_peer import patient_liar as liar

    result = await liar(tmp, run_id, learner, sampler, honest, lies, drained=drained)
    return {"messages": sum(result["honest"].values()) + sum(result["lies"].values()), **result}
