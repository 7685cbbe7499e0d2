"""Rollout gossip over real hivemind P2P daemons on 127.0.0.1: exactly-once delivery across process restarts,
rejection of bad traffic with logged reasons, the pull path, and the bounded outbox."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hivemind.p2p import P2P, PeerID

from swarmnode.identity import Identity
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.swarm.frames import read_control, write_frame
from swarmnode.swarm.rollout_push import RolloutReceiver, RolloutSender, push_protocol

sys.path.insert(0, str(Path(__file__).parent))
from gossip_peer import LIMITS, RUN, make_group  # noqa: E402
from push_helpers import daemons, pushing, wait_for  # noqa: E402

PEER_SCRIPT = str(Path(__file__).parent / "gossip_peer.py")


# ------------------------------------------------------------------------------------------------ helpers
class Collector:
    """The learner side's buffer stand-in: records what was handed over, in order."""

    def __init__(self):
        self.ids: list[str] = []

    def __call__(self, group: RolloutGroup) -> str:
        self.ids.append(group.group_id)
        return "ok"


# ----------------------------------------------------------------------------- processes and restarts
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Procs:
    """Subprocesses started by a test, stopped by pid (never by name) even when the test fails."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str, ready: Path, timeout: float = 60.0) -> subprocess.Popen:
        ready.unlink(missing_ok=True)
        log = open(self.tmp / f"{ready.stem}.{len(self.procs)}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, PEER_SCRIPT, *args, "--ready", str(ready)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        self.procs.append(proc)
        deadline = time.monotonic() + timeout
        while not (ready.exists() and ready.read_text()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"peer {args[0]} did not start: {log.name}")
            time.sleep(0.05)
        return proc

    def stop(self, proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """SIGTERM goes to the peer alone: it flushes through its own p2pd, then shuts it (a SIGTERM to the whole
        group killed the p2pd under an unacknowledged outbox: exit 3 under load). SIGKILL takes the group."""
        with contextlib.suppress(ProcessLookupError):
            if sig == signal.SIGKILL:
                os.killpg(proc.pid, sig)  # its own session: the peer and its p2pd
            else:
                proc.send_signal(sig)
        return proc.wait(timeout)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # a p2pd left behind by a SIGKILLed peer


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.close()


@pytest.mark.slow  # CI: .ci/run
@pytest.mark.usefixtures("starts_processes")
def test_exactly_once_one_learner_three_samplers_with_restarts(tmp_path, procs):
    port = free_port()
    learner_args = [
        "learner",
        "--identity",
        str(tmp_path / "learner.key"),
        "--port",
        str(port),
        "--journal",
        str(tmp_path / "journal"),
        "--received",
        str(tmp_path / "received"),
    ]
    ready = tmp_path / "learner.ready"
    learner = procs.start(*learner_args, ready=ready)
    addr = ready.read_text()

    def start_sampler(i: int, part: int, count: int) -> subprocess.Popen:
        return procs.start(
            "sampler",
            "--identity",
            str(tmp_path / f"s{i}.key"),
            "--learner",
            addr,
            "--count",
            str(count),
            "--interval",
            "0.05",
            "--created",
            str(tmp_path / f"created{i}"),
            "--tag",
            f"s{i}p{part}",
            ready=tmp_path / f"s{i}.ready",
        )

    # sampler 0 is stopped mid-run below: its first part must outlast the others' start-up, however slow under load
    # (one that had already sent its count and was exiting, asyncio's signal handlers gone, died of the SIGTERM)
    samplers = [start_sampler(i, 0, 1_000_000 if i == 0 else 60) for i in range(3)]
    time.sleep(1.0)
    # restart a sampler mid-run (graceful: it flushes), and continue it under the same identity
    assert samplers[0].poll() is None, "sampler 0 finished before it could be stopped mid-run"
    assert procs.stop(samplers[0]) == 0
    samplers[0] = start_sampler(0, 1, 30)
    # crash the learner mid-run (SIGKILL: no goodbye), bring it back on the same address and journal
    procs.stop(learner, signal.SIGKILL)
    time.sleep(0.5)
    learner = procs.start(*learner_args, ready=ready)
    for proc in samplers:
        assert proc.wait(120) == 0, "a sampler could not deliver everything"
    procs.stop(learner)

    created = [line for i in range(3) for line in (tmp_path / f"created{i}").read_text().split()]
    received = [line.split()[0] for line in (tmp_path / "received").read_text().splitlines()]
    assert len(created) == len(set(created)) > 100
    assert len(received) == len(set(received)), "a group was handed to the learner twice"
    assert set(received) == set(created), "a group was lost"


# --------------------------------------------------------------------------------------------- rejections
@pytest.mark.usefixtures("starts_processes")
def test_bad_traffic_rejected_with_reasons_while_good_traffic_continues(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="swarmnode.swarm.rollout_push")
    good_id, flood_id, junk_id = Identity.generate(), Identity.generate(), Identity.generate()
    got = Collector()

    async def scenario():
        async with daemons(4, [Identity.generate(), good_id, flood_id, junk_id], tmp_path) as (lp, gp, fp, jp):
            receiver = RolloutReceiver(RUN, got, LIMITS, rate=20.0, burst=20.0, strikes_to_ban=6, ban_seconds=30)
            await receiver.start(lp)
            sender = RolloutSender(gp, RUN, ack_timeout=5, max_backoff=0.5)
            await sender.start()
            sender.set_destinations([lp.peer_id])
            rng = random.Random(0)
            good = [make_group(good_id, rng, "good", i) for i in range(30)]

            async def good_traffic():
                for g in good:
                    sender.send(g)
                    await asyncio.sleep(0.02)

            async def push_raw(p2p: P2P, frames: list[bytes]) -> list[str]:
                _, reader, writer = await p2p.call_binary_stream_handler(lp.peer_id, push_protocol(RUN))
                statuses = []
                try:
                    for f in frames:
                        await write_frame(writer, f)
                        statuses.append((await read_control(reader))["status"])
                finally:
                    writer.close()
                return statuses

            async def flood():  # 150 valid groups as fast as possible from one peer
                return await push_raw(fp, [make_group(flood_id, rng, "flood", i).encode() for i in range(150)])

            async def garbage():
                out = {}
                tampered = make_group(junk_id, rng, "junk", 0)
                tampered.rewards[0] = 1.0 - tampered.rewards[0]  # content no longer matches its id
                out["tampered"] = await push_raw(jp, [tampered.encode()])
                forged = make_group(junk_id, rng, "junk", 2)
                forged.signature = make_group(junk_id, rng, "junk", 3).signature  # another record's signature
                out["forged"] = await push_raw(jp, [forged.encode()])
                out["not msgpack"] = await push_raw(jp, [b"\x00garbage"])
                out["replayed"] = await push_raw(jp, [good[0].encode()])  # someone else's group
                # oversized: announce more than the limit; the receiver answers without reading the body
                _, reader, writer = await jp.call_binary_stream_handler(lp.peer_id, push_protocol(RUN))
                writer.write((LIMITS.max_bytes + 1).to_bytes(8, "big"))
                await writer.drain()
                out["oversized"] = [(await read_control(reader))["status"]]
                writer.close()
                # truncated: announce 1000 bytes, send 10, hang up
                _, reader, writer = await jp.call_binary_stream_handler(lp.peer_id, push_protocol(RUN))
                writer.write((1000).to_bytes(8, "big") + b"x" * 10)
                await writer.drain()
                writer.close()
                await wait_for(lambda: receiver.rejections["truncated"] >= 1)
                out["after ban"] = await push_raw(jp, [make_group(junk_id, rng, "junk", 1).encode()])
                return out

            _, flood_statuses, junk = await asyncio.gather(good_traffic(), flood(), garbage())
            assert await sender.flush(20)
            await sender.close()
            receiver.close()
            return flood_statuses, junk, sender

    flood_statuses, junk, sender = asyncio.run(scenario())
    # good traffic: every group delivered exactly once
    assert sorted(got.ids) == sorted({*got.ids}) and sender.delivered == 30
    assert sender.statuses["ok"] == 30
    # flood: the burst got in, the rest was refused with a reason (and never decoded)
    assert flood_statuses.count("ok") >= 20 and flood_statuses.count("rate_limited") >= 50
    # garbage: each rejected, then the peer is ignored
    assert junk["tampered"] == junk["forged"] == junk["not msgpack"] == ["invalid"]
    assert junk["replayed"] == ["invalid"] and junk["oversized"] == ["oversized"]
    assert junk["after ban"] == ["banned"]
    text = caplog.text
    for reason in (
        "does not match the content hash",
        "bad signature",
        "not valid msgpack",
        "but sent by",
        "oversized message",
        "truncated stream",
        "flood",
        "ignoring",
    ):
        assert reason in text, reason


# ------------------------------------------------------------------------------------------ pull, outbox
@pytest.mark.usefixtures("starts_processes")
def test_late_learner_pulls_recent_groups(tmp_path):
    sid = Identity.generate()
    got = Collector()

    async def scenario():
        async with daemons(2, [sid, Identity.generate()], tmp_path) as (sp, lp):
            sender = RolloutSender(sp, RUN, recent_size=16)
            await sender.start()
            rng = random.Random(1)
            groups = []
            for i in range(20):  # no destination yet: groups only go to the recent ring
                g = make_group(sid, rng, "late", i)
                g_created = g.created_at
                groups.append((g_created, g))
                sender.send(g)
            unrouted = sender.unrouted  # sent with no destination: counted (a sampler's groups_dropped)
            receiver = RolloutReceiver(RUN, got, LIMITS)
            first = await receiver.pull(lp, sp.peer_id, limit=100)
            again = await receiver.pull(lp, sp.peer_id, limit=100)
            cutoff = groups[-5][0]
            newer = await receiver.pull(lp, sp.peer_id, since=cutoff, limit=100)
            await sender.close()
            return first, again, newer, [g for _, g in groups], unrouted

    first, again, newer, groups, unrouted = asyncio.run(scenario())
    assert unrouted == 20
    assert first == {"ok": 16}  # the ring is bounded: the 16 newest
    assert got.ids == [g.group_id for g in groups[-16:]]
    assert again == {"duplicate": 16}
    assert sum(newer.values()) == 4


@pytest.mark.usefixtures("starts_processes")
def test_bounded_outbox_drops_oldest_then_delivers_when_learner_appears(tmp_path):
    sid = Identity.generate()
    got = Collector()

    async def scenario():
        async with daemons(2, [sid, Identity.generate()], tmp_path) as (sp, lp):
            sender = RolloutSender(sp, RUN, outbox_size=5, base_backoff=0.05, max_backoff=0.2)
            await sender.start()
            sender.set_destinations([lp.peer_id])  # reachable, but no receiver yet: pushes fail and retry
            rng = random.Random(2)
            groups = [make_group(sid, rng, "box", i) for i in range(12)]
            for g in groups:
                sender.send(g)
            await asyncio.sleep(0.5)
            assert sender.dropped == 7 and sender.pending == 5 and sender.retries >= 1 and sender.unrouted == 0
            receiver = RolloutReceiver(RUN, got, LIMITS)
            await receiver.start(lp)
            assert await sender.flush(20)
            await sender.close()
            return groups

    groups = asyncio.run(scenario())
    assert got.ids == [g.group_id for g in groups[-5:]]


@pytest.mark.usefixtures("starts_processes")
def test_a_destination_that_never_answers_cannot_stall_the_sender(tmp_path):
    """A learner record with no process behind it is a destination like any other, but only peers that answer
    count for backpressure: the real learner gets every group and the sampler is never held back."""
    sid = Identity.generate()
    got = Collector()

    async def scenario():
        async with daemons(2, [sid, Identity.generate()], tmp_path) as (sp, lp):
            receiver = RolloutReceiver(RUN, got, LIMITS)
            await receiver.start(lp)
            sender = RolloutSender(sp, RUN, outbox_size=50, ack_timeout=1.0, max_backoff=0.2, alive_window=2.0)
            await sender.start()
            ghost = PeerID.from_base58(Identity.generate().peer_id)
            sender.set_destinations([lp.peer_id, ghost])
            rng = random.Random(3)
            for i in range(20):
                sender.send(make_group(sid, rng, "ghost", i))
            await wait_for(lambda: len(got.ids) == 20)
            # the ghost stops counting once its first window passes with no answer (the real learner, idle since
            # its last ack, may stop counting too: asking for exactly [learner] raced with its own window)
            await wait_for(lambda: str(ghost) not in sender.alive_destinations())
            pending, queued = sender.pending, sender.queued
            flushed = await sender.flush(5)
            await sender.close()
            receiver.close()
            return pending, queued, flushed

    pending, queued, flushed = asyncio.run(scenario())
    assert pending == 0 and queued == 20 and flushed  # the ghost's outbox is bounded and does not count


@pytest.mark.usefixtures("starts_processes")
def test_acks_tell_the_learners_version_and_senders_keep_the_highest(tmp_path):
    """Samplers follow a fast learner within an ack (fetching from the learner that told them), not a heartbeat."""
    sid = Identity.generate()
    got = Collector()
    version = [7]

    async def scenario():
        async with daemons(2, [sid, Identity.generate()], tmp_path) as (sp, lp):
            receiver = RolloutReceiver(RUN, got, LIMITS, version=lambda: version[0])
            await receiver.start(lp)
            sender = RolloutSender(sp, RUN)
            await sender.start()
            sender.set_destinations([lp.peer_id])
            assert sender.newest_hint == -1
            rng = random.Random(3)
            sender.send(make_group(sid, rng, "hint", 0))
            assert await sender.flush(20)
            first = sender.newest_hint
            version[0] = 12
            sender.send(make_group(sid, rng, "hint", 1))
            assert await sender.flush(20)
            second = sender.newest_hint
            version[0] = 3  # an ack never lowers it
            sender.send(make_group(sid, rng, "hint", 2))
            assert await sender.flush(20)
            await sender.close()
            return first, second, sender.newest_hint, sender.hint_peer, str(lp.peer_id)

    first, second, last, teller, learner = asyncio.run(scenario())
    assert (first, second, last) == (7, 12, 12) and teller == learner  # who told it: the stream's peer
    assert len(got.ids) == 3


def test_seen_journal_survives_restart_and_compacts(tmp_path):
    from swarmnode.swarm.rollout_push import SeenIds

    journal = tmp_path / "seen"
    seen = SeenIds(capacity=4, journal=journal)
    for i in range(9):  # the 9th add crosses 2x capacity and rewrites the journal with the 4 newest
        seen.add(f"id{i}")
    seen.close()
    assert journal.read_text().split() == ["id5", "id6", "id7", "id8"]
    with open(journal, "ab") as f:
        f.write(b"id9-cut-by-a-cra")  # a crash in the middle of a line
    again = SeenIds(capacity=4, journal=journal)
    assert "id8" in again and "id5" in again and "id4" not in again and len(again) == 4
    again.add("id10")
    again.close()
    assert journal.read_text().split()[-1] == "id10" and "id9-cut-by-a-cra" not in journal.read_text()


def test_a_closed_receiver_answers_busy_instead_of_raising():
    """A push that arrives while a stopping learner closes its receiver (decode pool shut down) is answered
    "busy" (the sampler keeps the group and retries elsewhere or later); nothing raises, nothing is handed over."""
    for inline in (0, 1 << 20):  # decoded in the pool, and on the loop
        got = Collector()
        receiver = RolloutReceiver(RUN, got, LIMITS, inline_decode_bytes=inline)
        sid = Identity.generate()
        group = make_group(sid, random.Random(5), "closed", 0)
        receiver.close()
        assert asyncio.run(receiver.accept_bytes(group.encode(), sid.peer_id)) == ("", "busy")
        assert got.ids == [] and receiver.statuses["busy"] == 1


def test_small_groups_decode_on_the_loop_large_ones_in_the_pool():
    """Both paths accept a good group, strike a forged one, and dedup; only a body over `inline_decode_bytes`
    runs in the decode pool (a pool thread's name is seen by the decoder)."""
    threads: list[str] = []

    def decode(body: bytes):
        threads.append(threading.current_thread().name)
        return RolloutGroup.decode(body, LIMITS)

    sid = Identity.generate()
    for inline, pool in ((1 << 20, False), (0, True)):
        threads.clear()
        got = Collector()
        receiver = RolloutReceiver(RUN, got, LIMITS, inline_decode_bytes=inline, decode=decode)
        group = make_group(sid, random.Random(inline), f"path{inline}", 0)
        forged = bytearray(make_group(sid, random.Random(7), f"forged{inline}", 0).encode())
        forged[-5] ^= 0x55  # inside the signed payload or the signature: verification fails

        async def push_all():
            return [
                await receiver.accept_bytes(body, sid.peer_id)
                for body in (group.encode(), group.encode(), bytes(forged))
            ]

        statuses = [status for _, status in asyncio.run(push_all())]
        receiver.close()
        assert statuses == ["ok", "duplicate", "invalid"]
        assert got.ids == [group.group_id]
        assert all(name.startswith("rollout-decode") == pool for name in threads) and len(threads) == 3


class BusyEvery:
    """A learner buffer that answers "busy" to every `n`-th group it is handed (the sender must retry it)."""

    def __init__(self, n: int):
        self.n, self.calls = n, 0
        self.ids: list[str] = []

    def __call__(self, group: RolloutGroup) -> str:
        self.calls += 1
        if self.calls % self.n == 0:
            return "busy"
        self.ids.append(group.group_id)
        return "ok"


@pytest.mark.parametrize("window", [1, 8])
@pytest.mark.usefixtures("starts_processes")
def test_windowed_pushes_deliver_each_group_once_and_retry_a_busy_one_mid_window(tmp_path, window):
    """Groups written back to back (up to `window` before their acks) are admitted together on the learner; a
    "busy" answer to one in the middle of a window leaves only that one to be sent again: every group arrives
    exactly once, the ones around it are not resent, and the journal shows every acknowledged group. The groups
    taken from one read are made durable with one call (one journal sync for all of them)."""
    sid = Identity.generate()
    consumer = BusyEvery(5)
    batches: list[list[str]] = []  # the group ids of each durability call

    async def journaled(taken: list[tuple[RolloutGroup, bytes]]) -> None:
        assert all(g.encode() == body for g, body in taken)
        batches.append([g.group_id for g, _ in taken])

    async def scenario():
        async with daemons(2, [sid, Identity.generate()], tmp_path) as (sp, lp):
            receiver = RolloutReceiver(RUN, consumer, LIMITS, journal=tmp_path / "seen", durable=journaled)
            await receiver.start(lp)
            rng = random.Random(window)
            groups = [make_group(sid, rng, f"win{window}", i) for i in range(40)]
            sender = await pushing(sp, lp, groups, base_backoff=0.01, max_backoff=0.05, window=window)
            assert await sender.flush(30)
            await sender.close()
            receiver.close()
            return groups, sender, receiver

    groups, sender, receiver = asyncio.run(scenario())
    assert sorted(consumer.ids) == sorted(g.group_id for g in groups) and len(consumer.ids) == 40
    assert receiver.statuses["busy"] == consumer.calls - 40 >= 8  # every 5th hand-over refused, then resent
    assert sender.retries >= 1
    assert sender.statuses["ok"] == 40 and sender.statuses["duplicate"] == 0 and sender.delivered == 40
    assert receiver.accepted == 40 and (tmp_path / "seen").read_text().split() == consumer.ids
    assert [i for batch in batches for i in batch] == consumer.ids  # each accepted group made durable, once
    assert max(map(len, batches)) == 1 if window == 1 else max(map(len, batches)) > 1


class HoldsUpTo:
    """A learner buffer that holds at most `limit` groups until the test drains it (its `full` says so)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.held: list[str] = []
        self.ids: list[str] = []
        self.full_answers = 0

    def __call__(self, group: RolloutGroup) -> str:
        assert len(self.held) < self.limit, "a group was handed over while the buffer said it was full"
        self.held.append(group.group_id)
        self.ids.append(group.group_id)
        return "ok"

    def full(self) -> bool:
        if len(self.held) >= self.limit:
            self.full_answers += 1
            return True
        return False


@pytest.mark.usefixtures("starts_processes")
def test_a_full_learner_answers_full_undecoded_and_the_sender_resends_without_backing_off(tmp_path):
    """Flow control: while the learner's buffer holds enough, pushes are answered "full" before they are decoded
    (nothing is handed over, no garbage strike, no rejection counted against the sampler); the sender keeps those
    groups, resends them after a short flat wait (no exponential backoff: `retries` stays 0), and each arrives
    exactly once as the buffer is drained."""
    sid = Identity.generate()
    buffer = HoldsUpTo(6)
    decoded = []

    async def scenario():
        async with daemons(2, [sid, Identity.generate()], tmp_path) as (sp, lp):
            receiver = RolloutReceiver(RUN, buffer, LIMITS, full=buffer.full)
            real_decode = receiver.decode
            receiver.decode = lambda body: decoded.append(1) or real_decode(body)
            await receiver.start(lp)
            groups = [make_group(sid, random.Random(7), "full", i) for i in range(20)]
            sender = await pushing(sp, lp, groups, base_backoff=5.0, max_backoff=5.0, window=4, full_wait=0.01)
            await wait_for(lambda: buffer.full_answers >= 5)  # the sender keeps knocking while it is full
            assert len(buffer.ids) == 6 and sender.pending == 14 and len(decoded) == 6
            while len(buffer.ids) < 20:  # the learner trains: it draws what it holds, a few at a time
                del buffer.held[:3]
                await asyncio.sleep(0.05)
            assert await sender.flush(10)
            await sender.close()
            receiver.close()
            return groups, sender, receiver

    groups, sender, receiver = asyncio.run(scenario())
    assert sorted(buffer.ids) == sorted(g.group_id for g in groups) and len(buffer.ids) == 20
    assert len(decoded) == 20  # a group answered "full" was never decoded
    assert receiver.statuses["full"] >= 5 and not receiver.rejections and receiver.accepted == 20
    assert sender.retries == 0 and sender.statuses["full"] >= 2 and sender.delivered == 20
