"""What a hostile or broken peer can cost the weight plane: oversized manifests, stalling holders, idle streams,
and the disk a failed or interrupted fetch leaves behind (real p2pd daemons on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess

import pytest
from hivemind.p2p import PeerID
from weights_helpers import RUN, assert_same, daemons, make_state, store

from swarmnode.identity import Identity
from swarmnode.protocol.codec import pack
from swarmnode.protocol.manifest import MAX_CHUNK_BYTES, MAX_CHUNKS, ChunkEntry, TensorEntry, WeightManifest
from swarmnode.swarm.frames import read_control, read_frame, write_frame
from swarmnode.swarm.weights import FetchError, ModelLayout, WeightFetcher, WeightServer, protocol_name

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes


def huge_manifest(identity: Identity) -> WeightManifest:
    """A validly signed manifest within every protocol limit that claims 16,384 chunks of 64 MiB (1 TiB)."""
    total = MAX_CHUNKS * MAX_CHUNK_BYTES
    return WeightManifest.create(
        identity=identity,
        run_id=RUN,
        version=7,
        parent_version=6,
        model_id="m",
        tensors=[TensorEntry("embed.weight", "uint8", (total,), 0, total)],
        chunks=[ChunkEntry(os.urandom(32), MAX_CHUNK_BYTES) for _ in range(MAX_CHUNKS)],
    )


def test_manifest_bigger_than_the_model_is_refused_before_allocating(tmp_path):
    learner = Identity.generate()
    encoded = huge_manifest(learner).encode()

    async def hostile(info, reader, writer):  # answers every manifest request with the huge manifest
        while (req := await read_control(reader)) is not None:
            await write_frame(writer, encoded if req.get("op") == "manifest" else b"")
        writer.close()

    async def scenario():
        async with daemons(3) as (evil, lp, sp):
            await evil.add_binary_stream_handler(protocol_name(RUN), hostile)
            ls = store(tmp_path, "l")
            await WeightServer(ls).start(lp)
            ls.publish(7, make_state(), learner, parent_version=6)
            fs = store(tmp_path, "s")
            fetcher = WeightFetcher(sp, fs, [learner.peer_id], layout=ModelLayout.of(make_state()))
            with pytest.raises(FetchError, match="this node's model has"):
                await fetcher.fetch([evil.peer_id], 7)
            assert fetcher.rejected_manifests == 1 and fs.partial_versions() == []  # nothing begun
            await fetcher.fetch([evil.peer_id, lp.peer_id], 7)  # the same fetcher goes on with honest holders
            assert_same(fs.state_dict(7), make_state())
            # a manifest whose tensors are not the model's is refused too
            other = {"embed.weight": make_state()["embed.weight"][:10]}
            with pytest.raises(FetchError, match="is float32 \\[10, 512\\], this node's model has float32 \\[256"):
                await WeightFetcher(
                    sp, store(tmp_path, "t"), [learner.peer_id], layout=ModelLayout.of(make_state())
                ).fetch([lp.peer_id], ls.publish(8, other, learner).version)

    asyncio.run(scenario())


def test_every_fetch_failure_is_a_fetch_error(tmp_path):
    learner = Identity.generate()

    async def scenario():
        async with daemons(2) as (lp, sp):
            ls = store(tmp_path, "l")
            await WeightServer(ls).start(lp)
            ls.publish(1, make_state(), learner)
            broken = store(tmp_path, "s")
            (broken.root / "partial").rmdir()
            (broken.root / "partial").write_bytes(b"")  # the store's directory became a file: an OSError
            with pytest.raises(FetchError, match="NotADirectoryError|FileExistsError"):
                await WeightFetcher(sp, broken, [learner.peer_id], layout=None).fetch([lp.peer_id], 1)

    asyncio.run(scenario())


def test_stalling_holders_are_given_up_in_seconds(tmp_path):
    """A holder that accepts streams and then says nothing (to the manifest request, or to chunk requests after
    advertising every chunk), or trickles a chunk a byte at a time, costs a fetch about `request_timeout`, not
    `timeout` per round: here the round timeout is 10 minutes and the fetch must end within one."""
    learner = Identity.generate()

    async def scenario():
        async with daemons(5) as (lp, mute, teaser, sp, trickler):
            ls = store(tmp_path, "l")
            await WeightServer(ls).start(lp)
            m = ls.publish(1, make_state(), learner)
            nb = (len(m.chunks) + 7) // 8

            async def silent(info, reader, writer):
                while await read_control(reader) is not None:
                    pass  # reads every request, answers none

            async def have_everything_send_nothing(info, reader, writer):
                while (req := await read_control(reader)) is not None:
                    if req.get("op") == "have":
                        await write_frame(writer, b"\xff" * nb + bytes(nb))
                    elif req.get("op") == "manifest":
                        await write_frame(writer, m.encode())

            async def have_everything_then_trickle(info, reader, writer):
                """Advertises every chunk, then answers a chunk request with its header and a byte a second."""
                while (req := await read_control(reader)) is not None:
                    if req.get("op") == "have":
                        await write_frame(writer, b"\xff" * nb + bytes(nb))
                    elif req.get("op") == "chunks":
                        writer.write(m.chunks[0].size.to_bytes(8, "big"))
                        for _ in range(600):
                            writer.write(b"x")
                            await writer.drain()
                            await asyncio.sleep(1)

            await mute.add_binary_stream_handler(protocol_name(RUN), silent)
            await teaser.add_binary_stream_handler(protocol_name(RUN), have_everything_send_nothing)
            await trickler.add_binary_stream_handler(protocol_name(RUN), have_everything_then_trickle)

            def fetcher(name):
                return WeightFetcher(
                    sp, store(tmp_path, name), [learner.peer_id], layout=None, timeout=600, request_timeout=2
                )

            with pytest.raises(FetchError, match="TimeoutError"):
                await asyncio.wait_for(fetcher("a").fetch([mute.peer_id], 1), 60)
            f = fetcher("b")
            await asyncio.wait_for(f.fetch([mute.peer_id, teaser.peer_id, lp.peer_id], 1), 60)
            assert_same(store(tmp_path, "b").state_dict(1), make_state())
            assert f.last_stats.chunks_by_holder[str(lp.peer_id)] == len(m.chunks)  # all from the honest one
            with pytest.raises(FetchError, match="unavailable"):
                await asyncio.wait_for(fetcher("c").fetch([teaser.peer_id], 1), 60)
            # a holder that keeps a chunk coming a byte at a time loses it to the honest one (the round's
            # no-progress timeout, 10 minutes here, is never what frees it)
            f = fetcher("t")
            await asyncio.wait_for(f.fetch([trickler.peer_id, lp.peer_id], 1), 60)
            assert_same(store(tmp_path, "t").state_dict(1), make_state())
            assert f.last_stats.chunks_by_holder[str(lp.peer_id)] == len(m.chunks)
            # a flood of listed holders that do not exist: the publisher is asked first, the others are bounded
            ghosts = [PeerID.from_base58(Identity.generate().peer_id) for _ in range(200)]
            f = WeightFetcher(
                sp,
                store(tmp_path, "d"),
                [learner.peer_id, str(lp.peer_id)],
                layout=None,  # lp's host
                timeout=600,
                request_timeout=2,
            )  # is the learner's here, as in a node
            assert len(f.pick_holders([*ghosts, lp.peer_id])) == WeightFetcher.MAX_HOLDERS
            assert f.pick_holders([*ghosts, lp.peer_id])[0] == lp.peer_id
            await asyncio.wait_for(f.fetch([*ghosts, lp.peer_id], 1), 60)
            assert f.last_stats.chunks_by_holder == {str(lp.peer_id): len(m.chunks)}

    asyncio.run(scenario())


def test_a_stalling_sampler_loses_its_chunks_to_the_publisher_within_a_second_of_silence(tmp_path):
    """A holder that is not a publisher, advertises every chunk and stalls mid-chunk is dropped after `STALL_S` of
    silence while the publisher (which holds every chunk) can serve: with `request_timeout` at 10 minutes, only
    that rule lets the fetch end within the minute, every chunk from the publisher."""
    learner = Identity.generate()

    async def scenario():
        async with daemons(3) as (lp, staller, sp):
            ls = store(tmp_path, "l")
            await WeightServer(ls).start(lp)
            m = ls.publish(1, make_state(), learner)
            nb = (len(m.chunks) + 7) // 8

            async def half_a_chunk_then_silence(info, reader, writer):
                while (req := await read_control(reader)) is not None:
                    if req.get("op") == "have":
                        await write_frame(writer, b"\xff" * nb + bytes(nb))
                    elif req.get("op") == "chunks":
                        writer.write(m.chunks[0].size.to_bytes(8, "big") + b"x" * 100)
                        await writer.drain()
                        await asyncio.sleep(3600)

            await staller.add_binary_stream_handler(protocol_name(RUN), half_a_chunk_then_silence)
            # under load the publisher may serve every chunk before the staller's `have` comes back: then the
            # staller was never engaged, and the fetch is tried again (a fresh store) until it was
            for attempt in range(3):
                f = WeightFetcher(
                    sp,
                    store(tmp_path, f"s{attempt}"),
                    [learner.peer_id, str(lp.peer_id)],
                    layout=None,
                    timeout=600,
                    request_timeout=600,
                )  # lp's host is the learner's here
                await asyncio.wait_for(f.fetch([staller.peer_id, lp.peer_id], 1, manifest=m), 60)
                assert_same(store(tmp_path, f"s{attempt}").state_dict(1), make_state())
                assert f.last_stats.chunks_by_holder == {str(lp.peer_id): len(m.chunks)}
                if f.last_stats.lost_holders:
                    break
            assert f.last_stats.lost_holders == {str(staller.peer_id)}

    asyncio.run(scenario())


def test_chunk_server_caps_streams_per_peer_and_in_total(tmp_path):
    learner = Identity.generate()

    async def ask(p2p) -> tuple[str, object]:
        """Open a stream and ask for version 1's manifest: ("served", writer) or ("closed", writer)."""
        _, reader, writer = await p2p.call_binary_stream_handler(lp_id, protocol_name(RUN))
        try:
            await write_frame(writer, pack({"op": "manifest", "version": 1}))
            data = await asyncio.wait_for(read_frame(reader, 1 << 20), 30)
        except (ConnectionError, asyncio.IncompleteReadError):
            data = None
        return ("closed" if data is None else "served"), writer

    async def scenario():
        nonlocal lp_id
        async with daemons(3) as (lp, a, b):
            lp_id = lp.peer_id
            ls = store(tmp_path, "l")
            server = await WeightServer(ls, idle_timeout=600, max_streams_per_peer=3, max_streams=5).start(lp)
            ls.publish(1, make_state(), learner)
            from_a = await asyncio.gather(*[ask(a) for _ in range(20)])  # 20 streams at once, kept open
            assert sorted(o for o, _ in from_a) == ["closed"] * 17 + ["served"] * 3
            assert server.open_streams[str(a.peer_id)] == 3 and server.streams_refused == 17
            from_b = [await ask(b) for _ in range(3)]  # 3 + 2 = the total cap
            assert [o for o, _ in from_b] == ["served", "served", "closed"] and server.streams_refused == 18
            for _, w in from_a:  # a's streams end: b is served again
                w.close()
            while server.open_streams[str(a.peer_id)]:
                await asyncio.sleep(0.05)
            outcome, w = await ask(b)
            assert outcome == "served"
            for _, w2 in [*from_b, (None, w)]:
                w2.close()

    lp_id = None
    asyncio.run(scenario())


def test_store_collects_orphan_temp_files_and_superseded_partials(tmp_path):
    learner = Identity.generate()
    ls = store(tmp_path, "l")
    manifests = {v: ls.publish(v, make_state(v), learner, parent_version=v - 1) for v in (1, 2, 3)}
    fs = store(tmp_path, "f")
    for v in (1, 2):  # two interrupted fetches: partial manifests whose chunks were partly written
        fs.begin(manifests[v], bytearray(manifests[v].total_bytes))
        fs.write_chunk(manifests[v].chunks[0].hex, ls.read_chunk(manifests[v].chunks[0].hex))
        fs.end_fetch(v)
    assert fs.partial_versions() == [2]  # v1's fetch had ended: the newer partial version supersedes it
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid nobody runs now
    leftovers = [tmp_path / "f" / "chunks" / f".abc.{dead.pid}.1f.tmp", tmp_path / "f" / "manifests" / "4.tmp"]
    mine = tmp_path / "f" / "chunks" / f".abc.{os.getpid()}.2f.tmp"  # a live writer's: kept
    for path in (*leftovers, mine):
        path.write_bytes(b"x" * 100)
    reopened = store(tmp_path, "f")
    assert not any(p.exists() for p in leftovers) and mine.exists()
    assert reopened.partial_versions() == [2]  # a restart resumes the newest partial version
    with contextlib.suppress(FileNotFoundError):
        mine.unlink()
    # once a newer version is complete, the partial one and its chunks go
    reopened.begin(manifests[3], bytearray(manifests[3].total_bytes))
    for chunk in manifests[3].chunks:
        reopened.write_chunk(chunk.hex, ls.read_chunk(chunk.hex))
    reopened.commit(manifests[3], ls.buffer(3))
    assert reopened.partial_versions() == [] and reopened.versions() == [3]
    assert {p.name for p in (tmp_path / "f" / "chunks").iterdir()} == {c.hex for c in manifests[3].chunks}


def test_strangers_cannot_hold_the_slots_a_trusted_fetch_needs(tmp_path):
    """Throwaway keys that open every stream they may and keep them alive with valid `have` polls hold only the
    strangers' share, lose a slot once idle, and a trusted peer's fetch still finds its streams."""
    learner = Identity.generate()

    async def poll_have(p2p, lp_id, polls: int) -> str:
        """Open a stream and send `have` every 0.3 s: "closed" when the server ends it, "open" after `polls`."""
        try:
            _, reader, writer = await p2p.call_binary_stream_handler(lp_id, protocol_name(RUN))
        except Exception:
            return "refused"
        try:
            for _ in range(polls):
                await write_frame(writer, pack({"op": "have", "version": 1}))
                if await asyncio.wait_for(read_frame(reader, 1 << 20), 30) is None:
                    return "closed"
                await asyncio.sleep(0.3)
            return "open"
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            return "closed"
        finally:
            writer.close()

    async def scenario():
        async with daemons(4) as (lp, a, b, honest):
            ls = store(tmp_path, "l")
            server = await WeightServer(
                ls,
                idle_timeout=2,
                max_streams=8,
                max_streams_per_peer=8,
                stranger_streams_per_peer=2,
                stranger_share=0.5,
                evict_after=1,
                trusted=lambda peer: peer == str(honest.peer_id),
            ).start(lp)
            ls.publish(1, make_state(), learner)
            flood = [asyncio.ensure_future(poll_have(p, lp.peer_id, 40)) for p in (a, b) for _ in range(8)]
            while sum(server.open_streams.values()) < 4:
                await asyncio.sleep(0.05)
            assert server.open_streams[str(a.peer_id)] == 2 and server.open_streams[str(b.peer_id)] == 2
            fetcher = WeightFetcher(honest, store(tmp_path, "h"), [learner.peer_id], layout=None, timeout=60)
            await asyncio.wait_for(fetcher.fetch([lp.peer_id], 1), 60)  # trusted: its streams are not refused
            assert_same(store(tmp_path, "h").state_dict(1), make_state())
            outcomes = await asyncio.gather(*flood)
            # each flood stream was refused at once or closed: have-map polls alone keep no slot
            assert set(outcomes) <= {"refused", "closed"}, outcomes
            assert server.streams_refused >= 12

    asyncio.run(scenario())
