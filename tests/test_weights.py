"""Weight store, manifests and multi-holder fetching over real hivemind P2P daemons on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
import torch
from hivemind.p2p import P2P
from weights_helpers import CHUNK, RUN, assert_same, daemons, make_state, store

from swarmnode.identity import Identity
from swarmnode.observe.progress import fetch_progress
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.manifest import MAX_MANIFEST_BYTES, WeightManifest
from swarmnode.swarm.frames import read_control, write_frame
from swarmnode.swarm.weights import (
    ChunkSchedule,
    FetchError,
    WeightFetcher,
    WeightServer,
    cut_chunks,
    flatten_into,
    plan_layout,
    protocol_name,
)


# ------------------------------------------------------------------------------------------------- offline
def test_publish_roundtrip_delta_and_gc(tmp_path):
    learner = Identity.generate()
    s = store(tmp_path, "l", keep_versions=2)
    state = make_state()
    m1 = s.publish(1, state, learner, model_id="builtin:tiny")
    assert_same(s.state_dict(1), state)
    state["layer.1.w"] += 1.0
    m2 = s.publish(2, state, learner, parent_version=1)
    shared = {c.hex for c in m1.chunks} & {c.hex for c in m2.chunks}
    assert 0 < len(shared) < len(m1.chunks)  # only the chunks under the changed tensor differ
    # a fresh store object on the same directory reads back from disk (no memory cache)
    assert_same(store(tmp_path, "l").state_dict(2), state)
    state["embed.weight"] -= 1.0
    s.publish(3, state, learner, parent_version=2)
    assert s.versions() == [2, 3]
    on_disk = {p.name for p in (tmp_path / "l" / "chunks").iterdir()}
    needed = {c.hex for v in (2, 3) for c in s.manifest(v).chunks}
    assert on_disk == needed  # v1-only chunks were collected


def test_a_fresh_learner_line_replaces_an_earlier_runs_higher_versions(tmp_path, caplog):
    """A run restarted with a new learner key begins again at version 0: a node whose store still holds the
    earlier line's higher versions keeps what it writes or fetches now, and forgets the earlier line."""
    old, new = Identity.generate(), Identity.generate()
    s = store(tmp_path, "s", keep_versions=2)
    for v in (40, 41):
        s.publish(v, make_state(v), old)
    s.publish(39, make_state(39), old)  # the same line going back: kept beside its newer versions
    assert s.versions() == [39, 41]
    with caplog.at_level(logging.WARNING):
        s.publish(0, make_state(0), new)
    assert_same(s.state_dict(0), make_state(0))
    assert s.versions() == [0] and s.latest() == 0
    assert "dropping versions 39, 41 held here" in caplog.text
    s.publish(1, make_state(1), new)
    assert s.versions() == [0, 1]


def test_states_beyond_the_chunk_limit_get_bigger_chunks(tmp_path, monkeypatch):
    import swarmnode.swarm.weights.layout as layout

    learner = Identity.generate()
    monkeypatch.setattr(layout, "MAX_CHUNKS", 8)  # the real limit (16,384) would take a 64 GB state here
    ls = store(tmp_path, "l")
    m = ls.publish(1, make_state(), learner)
    assert len(m.chunks) <= 8 and m.chunks[0].size > CHUNK and m.chunks[0].size % 4096 == 0
    assert WeightManifest.decode(m.encode()).chunks == m.chunks
    assert_same(store(tmp_path, "l").state_dict(1), make_state())


def test_have_map_complete_partial_and_unknown(tmp_path):
    learner = Identity.generate()
    ls = store(tmp_path, "l")
    m = ls.publish(1, make_state(), learner)
    n, nb = len(m.chunks), (len(m.chunks) + 7) // 8
    bits = lambda data: (int.from_bytes(data[:nb], "little"), int.from_bytes(data[nb:], "little"))  # noqa: E731
    assert len(ls.have_map(1)) == 2 * nb and bits(ls.have_map(1)) == ((1 << n) - 1, 0)  # all held, none coming
    assert ls.have_map(2) == b""  # neither held nor being fetched
    fs = store(tmp_path, "f")
    buf = bytearray(m.total_bytes)
    fs.begin(m, buf)
    assert bits(fs.have_map(1)) == (0, 0)  # being fetched, nothing yet
    offsets = m.chunk_offsets()
    for i in (0, 3, n - 1):
        fs.expose_chunk(1, m.chunks[i].hex, memoryview(buf)[offsets[i] : offsets[i] + m.chunks[i].size])
    fs.incoming(1).update({1, 2})
    assert bits(fs.have_map(1)) == ((1 << 0) | (1 << 3) | (1 << (n - 1)), (1 << 1) | (1 << 2))


def have(n: int, held: set[int], coming: set[int] = frozenset()) -> bytes:
    """A have-map answer as holders send it."""
    nb = (n + 7) // 8
    return sum(1 << i for i in held).to_bytes(nb, "little") + sum(1 << i for i in coming).to_bytes(nb, "little")


def test_work_queue_rarest_first_requeues_and_exclusions():
    async def scenario():
        n = 6
        work = ChunkSchedule(range(n), ["A", "B", "C"], max_failures=5, n_chunks=n)  # random rank = chunk index here
        work.set_have("A", have(n, set(range(n))))
        work.set_have("B", have(n, {0, 1, 2}))
        work.set_have("C", have(n, {0, 1}, coming={2}))  # chunk 2 is on its way to C: counts as held by 2
        assert work.complete("A") and not work.complete("B")
        assert work.take("A", 2) == [3, 4]  # only A has them: rarest
        assert work.take("B", 2) == [0, 1]  # 0, 1 and 2 are each held by 3 (2 coming to C): rank breaks the tie
        assert work.take("C", 1) == []  # C's chunks are taken
        work.give_back([0], "B")  # B failed chunk 0: not asked of B again this round
        assert work.take("B", 5) == [2]
        work.give_back([1], "B", missing=True)  # "not yet" from B: asked again later, others first
        assert work.take("B", 5) == []
        assert work.take("C", 5) == [0, 1]
        work.give_back([0, 1], "C")
        work.set_have("B", have(n, {0, 1, 2, 5}))  # B gains 5: 5 is now held by 2, 0 and 1 by 3
        assert work.take("A", 5) == [5, 0, 1]  # rarer first, then rank
        work.give_back([5, 0, 1], "A")
        assert work.take("A", 5) == [] and not work.can_help("A")
        work.new_round()  # every holder may be asked for everything again
        assert sorted(work.take("A", 5)) == [0, 1, 5] and work.pending == {}

        big = 20_000  # a manifest of many chunks: each is handed out exactly once, holders' maps respected
        work = ChunkSchedule(range(big), ["P", "Q"], max_failures=3, n_chunks=big)
        work.set_have("P", have(big, set(range(big))))
        work.set_have("Q", have(big, set(range(0, big, 2))))
        got_q = [i for _ in range(big) for i in work.take("Q", 1)]
        got_p = [i for _ in range(big) for i in work.take("P", 3)]
        assert set(got_q) == set(range(0, big, 2)) and set(got_p) == set(range(1, big, 2))
        assert not work.pending

    asyncio.run(scenario())


def test_a_publisher_is_asked_only_for_chunks_no_other_live_holder_shows():
    async def scenario():
        n = 4
        work = ChunkSchedule(range(n), ["L", "P", "Q"], max_failures=5, n_chunks=n, seeds=["L"])
        work.set_have("L", have(n, set(range(n))))
        work.set_have("P", have(n, {0, 1}))
        assert work.take("L", 4) == []  # Q has not said what it has: the publisher waits for it (a second at most)
        work.set_have("Q", have(n, set()))
        assert work.take("L", 4) == [2, 3]  # 0 and 1 are with P: the publisher is asked for the rest only
        work.give_back([2, 3], "L", missing=True)  # "not yet" (a first serve's hold): 2 and 3 wait
        assert work.take("P", 4) == [0, 1]
        work.give_back([0], "P", missing=True)  # P says "not yet" for 0: while P may not be asked, L may
        assert work.take("L", 4) == [0]
        work.give_back([0], "L")  # L failed it: back to P once P's "not yet" is over
        work.set_have("Q", have(n, {1}))
        work.lose("P")  # P failed as a whole: what only P and Q had goes to Q, then to the publisher
        work.give_back([1], "P")
        assert work.take("L", 4) == []  # 1 is with Q; 0 failed from L this round; 2, 3 still "not yet" from L
        assert work.take("Q", 4) == [1]

        work = ChunkSchedule(range(n), ["L", "P"], max_failures=5, n_chunks=n, seeds=["L"])
        work.set_have("L", have(n, set(range(n))))
        assert work.take("L", 4) == []  # P may hold some: wait for its have-map ...
        work.started -= ChunkSchedule.SEED_WAIT_S  # ... a second at most
        assert len(work.take("L", 2)) == 2
        assert (work.seed_taken, work.seed_taken_unheard) == (2, 2)  # counted: asked while P was unheard
        work.set_have("P", have(n, set()))
        assert len(work.take("L", 4)) == n - 2 and (work.seed_taken, work.seed_taken_unheard) == (n, 2)

    asyncio.run(scenario())


def test_fetch_progress_lines_for_slow_fetches_and_nothing_for_quick_ones():
    lines: list[str] = []
    with fetch_progress("weights v3", emit=lines.append, interactive=False, after_s=0, every_s=0) as update:
        update(0, 100_000_000)
        update(50_000_000, 100_000_000)
        update(100_000_000, 100_000_000)  # done: no line
    assert len(lines) == 2 and lines[1].startswith("weights v3: 50 of 100 MB (50%) after")
    quiet: list[str] = []
    with fetch_progress("weights v4", emit=quiet.append, interactive=False) as update:  # done within 2 s
        update(1, 2)
    assert quiet == []


def test_manifest_validation():
    learner = Identity.generate()
    s_state = make_state()
    tensors, total = plan_layout(s_state)
    buf = bytearray(total)
    flatten_into(s_state, tensors, buf)
    m = WeightManifest.create(
        identity=learner,
        run_id=RUN,
        version=3,
        parent_version=2,
        model_id="m",
        tensors=tensors,
        chunks=cut_chunks(buf, CHUNK),
    )
    back = WeightManifest.decode(m.encode())
    assert back.tensors == m.tensors and back.chunks == m.chunks and back.publisher == learner.peer_id
    tampered = bytearray(m.encode())
    tampered[tampered.index(b"model_id") + 9] ^= 1  # flip a byte inside the signed content
    with pytest.raises(InvalidRecord):
        WeightManifest.decode(bytes(tampered))
    with pytest.raises(InvalidRecord, match="exceeds"):
        WeightManifest.decode(b"\x00" * (MAX_MANIFEST_BYTES + 1))
    with pytest.raises(InvalidRecord, match="parent_version"):
        WeightManifest.create(
            identity=learner,
            run_id=RUN,
            version=1,
            parent_version=1,
            model_id="m",
            tensors=tensors,
            chunks=cut_chunks(buf, CHUNK),
        )


# ------------------------------------------------------------------------------------------------- network
@pytest.mark.usefixtures("starts_processes")
def test_fetch_delta_and_resume(tmp_path):
    learner = Identity.generate()

    async def scenario():
        async with daemons(3) as (lp, sp, empty):
            ls, ss = store(tmp_path, "l"), store(tmp_path, "s")
            await WeightServer(store(tmp_path, "e")).start(empty)  # a peer that never gets any version
            await WeightServer(ls).start(lp)
            state = make_state()
            m1 = ls.publish(1, state, learner)
            fetcher = WeightFetcher(sp, ss, [learner.peer_id], layout=None)
            seen = []
            await fetcher.fetch([lp.peer_id], progress=lambda done, total: seen.append((done, total)))
            assert_same(ss.state_dict(1), state)
            assert fetcher.last_stats.fetched_bytes == m1.total_bytes and seen[-1] == (m1.total_bytes,) * 2

            # delta: only the chunks under the changed tensor travel
            state["layer.0.norm"] += 1
            m2 = ls.publish(2, state, learner, parent_version=1)
            with fetch_progress("v2", interactive=True, after_s=0) as bar:  # the terminal's bar takes the same callback
                await fetcher.fetch([lp.peer_id], 2, progress=bar)
            changed = {c.hex for c in m2.chunks} - {c.hex for c in m1.chunks}
            assert fetcher.last_stats.fetched_bytes == sum(c.size for c in m2.chunks if c.hex in changed)
            assert_same(ss.state_dict(2), state)

            # resume: interrupt a fetch of v3 after a few chunks, restart the store, finish from disk
            for k in state:
                if state[k].is_floating_point():
                    state[k] = state[k] * 2
            m3 = ls.publish(3, state, learner, parent_version=2)
            rs = store(tmp_path, "r")
            partial = WeightFetcher(sp, rs, [learner.peer_id], layout=None, streams_per_holder=1, chunks_per_request=1)
            enough = asyncio.Event()
            task = asyncio.ensure_future(
                partial.fetch([lp.peer_id], 3, progress=lambda done, total: done >= 4 * CHUNK and enough.set())
            )
            await asyncio.wait_for(enough.wait(), 30)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.2)  # let the chunk writes already handed to threads land
            assert rs.versions() == [] and rs.partial_manifest(3) is not None
            # resuming (no chunk on disk yet) from a holder that has nothing (its have-map stays empty) gives up
            # after `timeout` instead of waiting for chunks forever
            store(tmp_path, "z").begin(m3, bytearray(m3.total_bytes))
            stuck = WeightFetcher(sp, store(tmp_path, "z"), [learner.peer_id], layout=None, timeout=1.0, max_rounds=1)
            with pytest.raises(FetchError, match="unavailable"):
                await asyncio.wait_for(stuck.fetch([empty.peer_id], 3), 20)
            restarted = WeightFetcher(sp, store(tmp_path, "r"), [learner.peer_id], layout=None)
            await restarted.fetch([lp.peer_id], 3)
            st = restarted.last_stats
            assert st.reused_bytes >= 3 * CHUNK and st.fetched_bytes + st.reused_bytes == m3.total_bytes
            assert_same(store(tmp_path, "r").state_dict(3), state)

    asyncio.run(scenario())


@pytest.mark.usefixtures("starts_processes")
def test_rejects_bad_manifest_corrupt_and_truncated_chunks(tmp_path, caplog):
    learner, stranger = Identity.generate(), Identity.generate()
    caplog.set_level(logging.INFO, logger="swarmnode.swarm.weights")

    async def scenario():
        async with daemons(4) as (lp, evil, bad, sp):
            ls = store(tmp_path, "l")
            await WeightServer(ls).start(lp)
            state = make_state(1)
            ls.publish(1, state, learner)

            # a manifest signed by a key that is not the run's learner
            es = store(tmp_path, "evil")
            await WeightServer(es).start(evil)
            es.publish(5, make_state(2), stranger)
            fetcher = WeightFetcher(sp, store(tmp_path, "s"), [learner.peer_id], layout=None)
            with pytest.raises(FetchError, match="not one of the run's learner keys"):
                await fetcher.fetch([evil.peer_id], 5)
            assert fetcher.rejected_manifests == 1

            # a holder serving truncated streams (claiming every chunk), and a holder whose chunks on disk are corrupt
            n_chunks = len(ls.manifest(1).chunks)

            async def truncating(info, reader, writer):
                while (req := await read_control(reader)) is not None:
                    if req.get("op") == "manifest":  # the learner's real manifest: only the chunks are broken
                        await write_frame(writer, ls.manifest(1).encode())
                        continue
                    if req.get("op") == "have":
                        await write_frame(writer, b"\xff" * ((n_chunks + 7) // 8) + bytes((n_chunks + 7) // 8))
                        continue
                    if req.get("op") == "chunks":  # announce a whole chunk, send 100 bytes, hang up
                        writer.write((CHUNK).to_bytes(8, "big") + b"x" * 100)
                        await writer.drain()
                        break
                    await write_frame(writer, b"")  # "don't have" for anything else
                writer.close()

            await bad.add_binary_stream_handler(protocol_name(RUN), truncating)
            # the truncating holder alone: the fetch fails cleanly (no hang, no partial version, no chunk kept) and
            # the holder is dropped for its truncated stream
            truncated_only = WeightFetcher(
                sp, store(tmp_path, "t"), [learner.peer_id], layout=None, max_rounds=1, timeout=5
            )
            with pytest.raises(FetchError, match="unavailable"):
                await truncated_only.fetch([bad.peer_id], 1)
            assert truncated_only.store.versions() == [] and truncated_only.store.partial_versions() == []
            assert not any((tmp_path / "t" / "chunks").iterdir())
            cs = store(tmp_path, "c")
            corrupt_host = await P2P.create(
                host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                nat_port_map=False,
                auto_nat=False,
                initial_peers=await lp.get_visible_maddrs(),
            )
            try:
                await WeightFetcher(corrupt_host, cs, [learner.peer_id], layout=None).fetch([lp.peer_id], 1)
                for chunk in ls.manifest(1).chunks:  # every chunk this holder has on disk goes bad
                    path = tmp_path / "c" / "chunks" / chunk.hex
                    path.write_bytes(b"\xff" * path.stat().st_size)
                cs2 = store(tmp_path, "c")  # restarted: serves from disk, no memory copy
                cs2_server = await WeightServer(cs2).start(corrupt_host)
                only_corrupt = WeightFetcher(sp, store(tmp_path, "s"), [learner.peer_id], layout=None, max_rounds=1)
                with pytest.raises(FetchError, match="unavailable"):  # a valid manifest, every chunk bad
                    await only_corrupt.fetch([corrupt_host.peer_id], 1)
                # nothing fetched: no partial version, no chunk left behind
                assert only_corrupt.store.versions() == [] and only_corrupt.store.partial_versions() == []
                assert list((tmp_path / "s" / "chunks").iterdir()) == []
                good = WeightFetcher(sp, store(tmp_path, "s"), [learner.peer_id], layout=None, max_rounds=3, timeout=5)
                await good.fetch([bad.peer_id, corrupt_host.peer_id, lp.peer_id], 1)
                assert_same(store(tmp_path, "s").state_dict(1), state)  # good traffic continued
                assert good.last_stats.chunks_by_holder[str(lp.peer_id)] >= 1
                return cs2_server.served_chunks, str(bad.peer_id)
            finally:
                await corrupt_host.shutdown()

    corrupt_served, bad_name = asyncio.run(scenario())
    text = caplog.text
    assert "not one of the run's learner keys" in text
    assert corrupt_served >= 1 and "hash mismatch" in text  # corrupt chunks were served, caught and logged
    assert f"holder {bad_name[-8:]} failed" in text  # the truncated stream dropped its holder (logged)


async def _learner_and_samplers(tmp_path, peers, learner, chunks: int):
    """peers[0] serves version 1 (`chunks` chunks, signed by `learner`); the others serve empty stores:
    (learner server, state, manifest, sampler stores, sampler servers)."""
    ls = store(tmp_path, "l")
    learner_server = await WeightServer(ls).start(peers[0])
    state = {f"t{i}": torch.full((CHUNK // 4,), float(i)) for i in range(chunks)}  # one chunk a tensor
    m = ls.publish(1, state, learner)
    stores = [store(tmp_path, f"s{i}") for i in range(len(peers) - 1)]
    servers = [await WeightServer(s).start(p) for s, p in zip(stores, peers[1:])]
    return learner_server, state, m, stores, servers


@pytest.mark.usefixtures("starts_processes")
def test_three_fetchers_concurrently_serve_each_other(tmp_path):
    learner = Identity.generate()

    async def scenario():
        async with daemons(4) as peers:
            lp, samplers = peers[0], peers[1:]
            learner_server, state, m, stores, servers = await _learner_and_samplers(tmp_path, peers, learner, 160)
            fetchers = [
                WeightFetcher(p, s, [learner.peer_id], layout=None, chunks_per_request=1)
                for p, s in zip(samplers, stores)
            ]
            await asyncio.gather(
                *[
                    f.fetch([lp.peer_id] + [q.peer_id for q in samplers if q is not p], 1)
                    for f, p in zip(fetchers, samplers)
                ]
            )
            for s in stores:
                assert_same(s.state_dict(1), state)
            served_by_samplers = sum(s.served_chunks for s in servers)
            print(f"served by samplers {served_by_samplers}, by the learner {learner_server.served_chunks}")
            assert served_by_samplers >= 1, "no sampler served another sampler"
            # and peers carry most of it: a chunk just sent to one fetcher is "not yet" to the others for a moment
            # (first serves), so the learner uploads about one copy (1.5-1.7 before first serves)
            learner_served = learner_server.served_chunks
            assert learner_served < 1.3 * len(m.chunks), (learner_served, served_by_samplers)
            # holders are asked only for chunks their have-maps show: every "not yet" was a first serve's hold
            deferred = learner_server.first_serves.deferred + sum(s.first_serves.deferred for s in servers)
            assert sum(f.last_stats.missing_chunks for f in fetchers) == deferred
            # counters agree between both sides
            from_samplers = sum(f.last_stats.chunks_by_holder[str(q.peer_id)] for f in fetchers for q in samplers)
            assert from_samplers == served_by_samplers
            assert learner_server.served_chunks + served_by_samplers == 3 * len(m.chunks)

    asyncio.run(scenario())


FIRST_SERVE_HOLD_S = 1.2  # > first_serve.HOLD_S


@pytest.mark.usefixtures("starts_processes")
def test_fetchers_one_after_another_take_the_version_from_the_earlier_ones(tmp_path):
    """A publisher is asked only for chunks no other live holder shows: the first fetcher takes the version from
    the learner, the next ones from the samplers that hold it (before: each took a share from the learner too)."""
    learner = Identity.generate()

    async def scenario():
        async with daemons(4) as peers:
            lp, samplers = peers[0], peers[1:]
            learner_server, state, m, stores, servers = await _learner_and_samplers(tmp_path, peers, learner, 64)
            for k, (p, s) in enumerate(zip(samplers, stores)):  # one after another, each told of the earlier ones
                await asyncio.sleep(FIRST_SERVE_HOLD_S)  # past the first serves' holds: not what is tested here
                # the learner's daemon is not its signing key here: both are its identity in a real node
                fetcher = WeightFetcher(p, s, [learner.peer_id, str(lp.peer_id)], layout=None, chunks_per_request=1)
                await fetcher.fetch([lp.peer_id] + [q.peer_id for q in samplers[:k]], 1)
                assert_same(s.state_dict(1), state)
            return learner_server.served_chunks, [x.served_chunks for x in servers], len(m.chunks)

    learner_served, sampler_served, chunks = asyncio.run(scenario())
    assert learner_served == chunks, (learner_served, sampler_served)  # one copy: the first fetcher's
    assert sum(sampler_served) == 2 * chunks


@pytest.mark.usefixtures("starts_processes")
def test_pull_mode_asks_learners_for_their_newest_version_directly(tmp_path, caplog):
    """`WeightPuller.newest_from`: one manifest request to each learner (no DHT look), the newest valid answer wins,
    a manifest the run would refuse is logged and skipped; the fetch then uses that manifest without asking again."""
    from hivemind.p2p import PeerID

    from swarmnode.swarm.follower import WeightPuller

    learner, stranger = Identity.generate(), Identity.generate()

    class NoHolders:  # the DHT's peer list: not used by `newest_from`
        async def holders(self):
            return []

        def proven(self, peers):
            pass

    async def scenario():
        async with daemons(4) as (lp, evil, hung, sp):
            ls, es = store(tmp_path, "l"), store(tmp_path, "e")
            await WeightServer(ls).start(lp)
            await WeightServer(es).start(evil)

            async def never_answers(info, reader, writer):  # a learner that hangs (died behind a live connection)
                await asyncio.sleep(3600)

            await hung.add_binary_stream_handler(protocol_name(RUN), never_answers)
            puller = WeightPuller(sp, store(tmp_path, "s"), NoHolders(), sink=None, trusted=[learner.peer_id])
            assert await puller.newest_from([lp.peer_id]) is None  # it holds nothing yet: no answer
            state = make_state(3)
            ls.publish(1, make_state(2), learner)
            ls.publish(2, state, learner, parent_version=1)
            es.publish(9, make_state(4), stranger)  # newer, but not signed by the run's learner
            found = await puller.newest_from([lp.peer_id, evil.peer_id])
            assert found is not None and found[0] == 2
            assert found[1]["manifest"].version == 2 and found[1]["publisher"] == learner.peer_id
            assert "not one of the run's learner keys" in caplog.text
            unknown = PeerID.from_base58(Identity.generate().peer_id)  # nobody listens there
            assert await puller.newest_from([unknown], timeout=1.0) is None
            assert await puller.newest_from([]) is None
            # one learner answered: one that hangs gets the grace, not the whole timeout, and is not waited for
            found = await asyncio.wait_for(puller.newest_from([hung.peer_id, lp.peer_id], timeout=60, grace=0.2), 20)
            assert found is not None and found[0] == 2

            fetcher = WeightFetcher(sp, store(tmp_path, "s"), [learner.peer_id], layout=None)
            asked = []
            real_ask = fetcher.fetch_manifest
            fetcher.fetch_manifest = lambda *a, **kw: asked.append(a) or real_ask(*a, **kw)
            await fetcher.fetch([lp.peer_id], 2, manifest=found[1]["manifest"])
            assert not asked  # the manifest in hand was not asked for again
            assert_same(store(tmp_path, "s").state_dict(2), state)
            foreign = es.manifest(9)  # a manifest in hand is checked like any other
            with pytest.raises(FetchError, match="not one of the run's learner keys"):
                await fetcher.fetch([evil.peer_id], 9, manifest=foreign)

    asyncio.run(scenario())
