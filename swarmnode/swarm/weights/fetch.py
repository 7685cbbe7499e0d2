"""Fetching a version into a WeightStore from every holder at once, verifying everything.

Fetchers poll holders' have-maps and ask each holder only for chunks it has, rarest first (`schedule`), so
concurrent fetchers spread the publisher's chunks and then serve each other. Per byte, a fetch costs what a raw
stream costs plus one sha256: answers are read with `recv_into` straight into the version's page-aligned buffer
(frames.FrameSink), hashed in a worker thread, and written to disk with O_DIRECT from that buffer in the
background (no page-cache copy).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from hivemind.p2p import P2P, PeerID

from swarmnode.backoff import Backoff
from swarmnode.protocol.codec import InvalidRecord, pack
from swarmnode.protocol.manifest import MAX_MANIFEST_BYTES, WeightManifest
from swarmnode.swarm.frames import FrameSink, read_frame, write_frame
from swarmnode.swarm.weights.layout import Buffer, ModelLayout, aligned_buffer, hash_matches
from swarmnode.swarm.weights.schedule import ChunkSchedule
from swarmnode.swarm.weights.server import protocol_name
from swarmnode.swarm.weights.store import FetchError, WeightStore

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]  # (bytes done, bytes total): how a fetch reports its progress
_HAVE = -1  # an outstanding have-map request, in a worker's queue of answers


async def ping_holder(p2p: P2P, run_id: str, peer: str) -> bool:
    """Whether `peer` serves the run's weights now: its daemon opened our stream under the run's protocol (the
    cheapest proof that a peer record has a live holder behind it; a full server may close the stream at once)."""
    _, _, writer = await p2p.call_binary_stream_handler(PeerID.from_base58(peer), protocol_name(run_id))
    try:
        await write_frame(writer, pack({"op": "bye"}))
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
    return True


@dataclass
class FetchStats:
    """What one fetch did."""

    version: int
    total_bytes: int
    fetched_bytes: int = 0
    reused_bytes: int = 0
    bad_chunks: int = 0
    missing_chunks: int = 0
    seconds: float = 0.0
    chunks_by_holder: collections.Counter[str] = field(default_factory=collections.Counter)
    lost_holders: frozenset[str] = frozenset()  # holders dropped (stalled, timed out, broke the protocol)
    seed_chunks: int = 0  # chunks asked of a publisher (`ChunkSchedule.seeds`)
    seed_chunks_unheard: int = 0  # of those, asked after its wait while another holder was still unheard

    @property
    def bytes_per_second(self) -> float:
        return self.fetched_bytes / self.seconds if self.seconds > 0 else 0.0


class WeightFetcher:
    """Fetches versions into a WeightStore from many holders in parallel, verifying everything.

    Each holder gets a window of requests in flight sized to `PIPELINE_S` of its measured rate (2 to
    `MAX_WINDOW` chunks): a fast holder streams without gaps, a slow one does not sit on chunks others could
    serve sooner. A holder that does not connect and answer within `request_timeout`, sends no byte for that
    long while asked for something, or takes longer than `request_timeout` plus the answer's size at
    `MIN_HOLDER_RATE` (a holder that advertises every chunk and then trickles or stalls mid-chunk), is dropped for
    the rest of the fetch and its chunks go to the other holders at once; a holder other than the allowed
    publishers goes silent mid-answer for only `STALL_S` while an allowed publisher (which holds every chunk) is
    still among the holders. A round ends when no holder gained a missing chunk for `timeout`. `layout` is the
    model the weights are for: a manifest that does not fit it is refused before anything is allocated for it
    (None, only where the caller has no model: tests, benchmarks)."""

    PIPELINE_S = 0.1
    MAX_WINDOW = 8
    MIN_HOLDER_RATE = 256 << 10  # bytes/s below which an answer in progress is given up (a slow-loris holder)
    MAX_HOLDERS = 32  # holders one fetch talks to: the allowed publishers first, then others at random
    STALL_S = 1.0  # silence mid-answer after which a non-publisher holder is dropped while a publisher can serve

    def __init__(
        self,
        p2p: P2P,
        store: WeightStore,
        allowed_publishers: Iterable[str],
        *,
        layout: ModelLayout | None,
        streams_per_holder: int = 1,
        chunks_per_request: int = 1,
        window: int | None = None,
        timeout: float = 30.0,
        request_timeout: float = 5.0,
        max_rounds: int = 5,
    ):
        self.p2p = p2p
        self.store = store
        self.allowed_publishers = set(allowed_publishers)
        self.streams_per_holder = streams_per_holder
        self.chunks_per_request = chunks_per_request
        self.window = window  # chunks requested and not yet received, per stream (None: adapts to the holder)
        self.timeout = timeout
        self.request_timeout = request_timeout
        self.max_rounds = max_rounds
        self.layout = layout
        self.rejected_manifests = 0
        self.last_stats: FetchStats | None = None

    async def fetch_manifest(self, holders: list[PeerID], version: int = -1) -> WeightManifest:
        """The first valid manifest for `version` (-1: newest) any holder gives, signed by an allowed learner."""
        reasons = []
        for holder in holders:
            try:
                data = await asyncio.wait_for(self._ask_manifest(holder, version), self.request_timeout)
                if not data:
                    reasons.append(f"{str(holder)[-8:]}: does not hold version {version}")
                    continue
                return self.check_manifest(WeightManifest.decode(data), version)
            except InvalidRecord as exc:
                self.rejected_manifests += 1
                logger.warning("weights: rejected manifest from %s: %s", str(holder)[-8:], exc)
                reasons.append(f"{str(holder)[-8:]}: {exc}")
            except Exception as exc:  # unreachable holder, timeout, truncated answer
                reasons.append(f"{str(holder)[-8:]}: {type(exc).__name__} {exc}")
        raise FetchError(f"no valid manifest for version {version}: " + "; ".join(reasons or ["no holders"]))

    async def newest_manifest(self, holder: PeerID) -> WeightManifest | None:
        """The manifest of the newest version `holder` holds (one request, no DHT look), None when it holds none;
        raises InvalidRecord for a manifest this fetcher would refuse, and on a timeout or a broken stream."""
        data = await asyncio.wait_for(self._ask_manifest(holder, -1), self.request_timeout)
        return self.check_manifest(WeightManifest.decode(data)) if data else None

    async def _ask_manifest(self, holder: PeerID, version: int) -> bytes | None:
        _, reader, writer = await self.p2p.call_binary_stream_handler(holder, protocol_name(self.store.run_id))
        try:
            await write_frame(writer, pack({"op": "manifest", "version": version}))
            data = await read_frame(reader, MAX_MANIFEST_BYTES)
            await write_frame(writer, pack({"op": "bye"}))
            return data
        finally:
            writer.close()

    def check_manifest(self, m: WeightManifest, version: int = -1) -> WeightManifest:
        """Raise InvalidRecord unless `m` (signature already verified) is this run's, from an allowed learner, and
        fits this node's model."""
        if m.publisher not in self.allowed_publishers:
            raise InvalidRecord(f"manifest signed by {m.publisher[-8:]}, not one of the run's learner keys")
        if m.run_id != self.store.run_id:
            raise InvalidRecord(f"manifest for run {m.run_id!r}, not {self.store.run_id!r}")
        if version >= 0 and m.version != version:
            raise InvalidRecord(f"asked for version {version}, got {m.version}")
        if self.layout is not None:
            self.layout.check(m)
        return m

    async def fetch(
        self,
        holders: list[PeerID],
        version: int = -1,
        *,
        progress: ProgressCallback | None = None,
        manifest: WeightManifest | None = None,
    ) -> WeightManifest:
        """Make `version` (-1: the newest a holder has) complete in the store; returns its manifest. `manifest`:
        that version's manifest, already received (`newest_manifest`): it is checked again, not asked for. Every
        failure (no valid manifest, chunks unavailable, a disk or memory error) raises FetchError."""
        try:
            if manifest is not None:
                manifest = self.check_manifest(manifest, version)
            return await self._fetch(self.pick_holders(holders), version, progress, manifest)
        except FetchError:
            raise
        except Exception as exc:  # OSError (ENOSPC, ENOMEM), MemoryError, a record that does not validate...
            raise FetchError(f"version {version}: {type(exc).__name__}: {exc}") from exc

    def pick_holders(self, holders: list[PeerID]) -> list[PeerID]:
        """The holders to use: the allowed publishers among them first (they sign the manifests and hold every
        chunk), then up to `MAX_HOLDERS` in all of the others, at random: a flood of peers that hold nothing
        (or do not answer) costs a fetch a bounded number of connection attempts, none before the publisher's."""
        unique = list(dict.fromkeys(holders))
        publishers = [h for h in unique if str(h) in self.allowed_publishers]
        others = [h for h in unique if str(h) not in self.allowed_publishers]
        random.shuffle(others)
        return (publishers + others)[: max(self.MAX_HOLDERS, len(publishers))]

    async def _fetch(
        self, holders: list[PeerID], version: int, progress: ProgressCallback | None, given: WeightManifest | None
    ) -> WeightManifest:
        if version >= 0 and (m := self.store.manifest(version)) is not None:
            return m
        start = time.perf_counter()
        manifest = self.store.partial_manifest(version) if version >= 0 else None
        if manifest is not None:
            try:
                self.check_manifest(manifest, version)
            except InvalidRecord as exc:  # e.g. signed by a key the run no longer trusts: start over
                logger.warning("weights: dropping the partial version %d (%s)", version, exc)
                self.store.abandon(version)
                manifest = None
        if manifest is None:
            manifest = given or await self.fetch_manifest(holders, version)
            if (m := self.store.manifest(manifest.version)) is not None:
                return m
        buf = aligned_buffer(manifest.total_bytes)  # the one preallocated buffer chunks land in
        self.store.begin(manifest, buf)
        try:
            stats = await self._fill(holders, manifest, buf, progress)
        except BaseException:
            self.store.end_fetch(manifest.version)
            raise
        self.store.commit(manifest, buf)
        stats.seconds = time.perf_counter() - start
        self.last_stats = stats
        return manifest

    async def _fill(
        self, holders: list[PeerID], manifest: WeightManifest, buf: Buffer, progress: ProgressCallback | None
    ) -> FetchStats:
        """Get every chunk of `manifest` into `buf` (held ones from the store, the rest from holders)."""
        stats = FetchStats(manifest.version, manifest.total_bytes)
        offsets = manifest.chunk_offsets()
        view = memoryview(buf)
        todo = []
        for i, (chunk, off) in enumerate(zip(manifest.chunks, offsets)):
            if self.store.load_chunk_into(chunk, view[off : off + chunk.size]):
                stats.reused_bytes += chunk.size
                self.store.expose_chunk(manifest.version, chunk.hex, view[off : off + chunk.size])
            else:
                todo.append(i)
        random.shuffle(todo)  # concurrent fetchers start on different chunks, so they can serve each other
        done_bytes = stats.reused_bytes
        if progress:
            progress(done_bytes, manifest.total_bytes)
        work = ChunkSchedule(
            todo,
            [str(h) for h in holders],
            max_failures=self.max_rounds * max(1, len(holders)),
            n_chunks=len(manifest.chunks),
            incoming=self.store.incoming(manifest.version),
            seeds=self.allowed_publishers,
        )
        writes: list[asyncio.Future] = []

        def on_chunk(i: int, holder: str) -> None:
            nonlocal done_bytes
            chunk = manifest.chunks[i]
            piece = view[offsets[i] : offsets[i] + chunk.size]
            self.store.expose_chunk(manifest.version, chunk.hex, piece)
            # persisted in the background: a slow disk does not hold up reading (the bytes are in `buf` already)
            writes.append(asyncio.ensure_future(asyncio.to_thread(self.store.write_chunk, chunk.hex, piece)))
            stats.fetched_bytes += chunk.size
            stats.chunks_by_holder[holder] += 1
            done_bytes += chunk.size
            if progress:
                progress(done_bytes, manifest.total_bytes)

        between_rounds = Backoff(0.2, 5.0, jitter=False)
        for round_ in range(self.max_rounds):
            live = [h for h in holders if str(h) not in work.lost]
            if not work.pending or not live:
                break
            if round_:
                await asyncio.sleep(between_rounds.failure())
                work.new_round()
            await self._round(
                [
                    self._worker(h, manifest, view, offsets, work, stats, on_chunk)
                    for h in live
                    for _ in range(self.streams_per_holder)
                ],
                work,
            )
        if writes:
            await asyncio.gather(*writes)
        stats.lost_holders = frozenset(work.lost)
        stats.seed_chunks, stats.seed_chunks_unheard = work.seed_taken, work.seed_taken_unheard
        missing = len(work.pending) + len(work.failed)
        if missing:
            if not stats.fetched_bytes and not stats.reused_bytes:
                self.store.abandon(manifest.version)  # nothing to resume from: no partial left behind
            raise FetchError(
                f"version {manifest.version}: {missing} chunks unavailable from "
                f"{len(holders)} holders (bad {stats.bad_chunks}, missing {stats.missing_chunks})"
            )
        return stats

    @staticmethod
    async def _round(workers: list[Awaitable[None]], work: ChunkSchedule, grace_s: float = 1.0) -> None:
        """Run one round's workers until they end, or until every chunk is in: then those still connecting or
        waiting (a holder with nothing left to give) get `grace_s` to say goodbye and are cancelled."""
        tasks = [asyncio.ensure_future(w) for w in workers]
        try:
            while not work.finished():
                running = [t for t in tasks if not t.done()]
                if not running:
                    return
                changed = asyncio.ensure_future(work.changed.wait())
                await asyncio.wait([*running, changed], return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
            if running := [t for t in tasks if not t.done()]:
                await asyncio.wait(running, timeout=grace_s)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _answer(
        self, answer: asyncio.Future[int], sink: FrameSink, size: int, silence_s: Callable[[], float]
    ) -> int:
        """The length of an awaited answer frame of up to `size` bytes; TimeoutError once the stream brought no
        byte for `silence_s()` (at most `request_timeout`), or the answer took longer than `request_timeout` +
        `size` / `MIN_HOLDER_RATE` (a slow holder that keeps sending is waited for that long, not for ever)."""
        deadline = time.monotonic() + self.request_timeout + size / self.MIN_HOLDER_RATE
        while True:
            try:
                wait = min(silence_s(), max(0.01, deadline - time.monotonic()))
                return await asyncio.wait_for(asyncio.shield(answer), wait)
            except TimeoutError:
                now = time.monotonic()
                if now - sink.last_received >= (silent := silence_s()):
                    raise TimeoutError(f"no byte in {silent:.1f} s") from None
                if now >= deadline:
                    raise TimeoutError(
                        f"{size} bytes not in after {now - deadline + self.request_timeout:.0f}"
                        " s (below the minimum holder rate)"
                    ) from None

    async def _worker(
        self,
        holder: PeerID,
        manifest: WeightManifest,
        view: memoryview,
        offsets: list[int],
        work: ChunkSchedule,
        stats: FetchStats,
        on_chunk: Callable[[int, str], None],
    ) -> None:
        name = str(holder)
        sink: FrameSink | None = None
        outstanding: collections.deque[tuple[int, asyncio.Future[int]]] = collections.deque()  # asked, not read
        checks: collections.deque[asyncio.Future] = collections.deque()

        async def check(i: int, n: int) -> None:
            chunk = manifest.chunks[i]
            piece = view[offsets[i] : offsets[i] + chunk.size]
            if not n:
                stats.missing_chunks += 1
                work.give_back([i], name, missing=True)
            elif n != chunk.size or not await asyncio.to_thread(hash_matches, chunk, piece):
                stats.bad_chunks += 1
                logger.warning(
                    "weights: bad chunk %s from %s (hash mismatch); trying another holder", chunk.hex[:12], name[-8:]
                )
                work.give_back([i], name)
            else:
                work.done(i)
                on_chunk(i, name)

        have_buf, have_asked = bytearray(2 * ((len(manifest.chunks) + 7) // 8)), False

        def silence_s() -> float:  # how long this holder may go silent mid-answer (see the class docstring)
            backup = name not in self.allowed_publishers and any(
                h in self.allowed_publishers and h not in work.lost for h in work.holders
            )
            return min(self.request_timeout, self.STALL_S) if backup else self.request_timeout

        rate, last_arrival, window = 0.0, 0.0, self.window or 2  # this holder's bytes/s, measured
        try:
            _, reader, writer = await asyncio.wait_for(
                self.p2p.call_binary_stream_handler(holder, protocol_name(self.store.run_id)), self.request_timeout
            )
            sink = FrameSink.attach(reader, writer)  # chunks land in `view` directly
            while True:
                if not have_asked and work.want_have(name):  # what does this holder have by now?
                    outstanding.append((_HAVE, sink.expect(memoryview(have_buf))))
                    sink.send(pack({"op": "have", "version": manifest.version}))
                    have_asked = True
                # keep a window of requests in flight, so the holder never waits for our next request
                while len(outstanding) < window and name in work.have:
                    batch = work.take(name, min(self.chunks_per_request, window - len(outstanding)))
                    if not batch:
                        break
                    outstanding.extend(
                        (i, sink.expect(view[offsets[i] : offsets[i] + manifest.chunks[i].size])) for i in batch
                    )
                    sink.send(pack({"op": "chunks", "hashes": [manifest.chunks[i].sha256 for i in batch]}))
                if not outstanding:
                    if work.finished() or (work.pending and not work.can_help(name)):
                        break  # all done, or nothing left that this holder has not failed
                    if not work.in_flight and time.monotonic() - work.last_progress > self.timeout:
                        break  # no holder has gained a missing chunk for a while: end this round
                    changed = work.changed  # chunks in flight elsewhere may come back, holders gain chunks
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(changed.wait(), ChunkSchedule.HAVE_REFRESH_S)
                    continue
                i, answer = outstanding[0]
                n = await self._answer(
                    answer, sink, len(have_buf) if i == _HAVE else manifest.chunks[i].size, silence_s
                )
                outstanding.popleft()
                if i == _HAVE:
                    if n not in (0, len(have_buf)):
                        raise InvalidRecord(f"have-map of {n} bytes for {len(manifest.chunks)} chunks")
                    work.set_have(name, bytes(have_buf[:n]))
                    have_asked = False
                    continue
                now = time.monotonic()
                if last_arrival and now > last_arrival:
                    sample = n / (now - last_arrival)
                    rate = 0.7 * rate + 0.3 * sample if rate else sample
                    if not self.window:
                        window = max(2, min(self.MAX_WINDOW, 1 + math.ceil(rate * self.PIPELINE_S / max(1, n))))
                last_arrival = now
                checks.append(asyncio.ensure_future(check(i, n)))  # hash and persist off the loop; keep reading
                while len(checks) > self.MAX_WINDOW:  # hashing may lag; the bytes are in place
                    await checks.popleft()
            await asyncio.gather(*checks)
            sink.send(pack({"op": "bye"}))
        except InvalidRecord as exc:
            logger.warning("weights: holder %s broke protocol: %s", name[-8:], exc)
            self._drop(sink, outstanding, work, name)
        except Exception as exc:  # timeouts, resets, truncated streams, daemon errors: another holder takes over
            logger.info("weights: holder %s failed (%s: %s); others continue", name[-8:], type(exc).__name__, exc)
            self._drop(sink, outstanding, work, name)
        finally:
            if sink is not None:
                sink.close()
            if checks:
                await asyncio.gather(*checks, return_exceptions=True)

    @staticmethod
    def _drop(sink: FrameSink | None, outstanding: collections.deque, work: ChunkSchedule, holder: str) -> None:
        """Stop the stream first (nothing more lands in the buffer), then give its chunks to other holders."""
        if sink is not None:
            sink.close()
        work.give_back([i for i, _ in outstanding if i != _HAVE], holder)
        outstanding.clear()
        work.lose(holder)
