"""Version following: which policy version a sampler should hold next, and getting it there.

- `WeightFollower` decides: it learns of new versions from the DHT's announcements (`poll`, once per heartbeat,
  or blocking when the sampler must catch up), from the learners themselves (`poll(direct=True)`, pull mode before
  each batch: one request to each learner instead of a DHT look) and from learners' acks (`hint`, at once),
  ignores versions not newer than what it already has, runs one fetch at a time, and after a failed fetch waits
  out an exponential backoff with jitter (capped) before trying again, also when the sampler is paused as too
  stale.
- `WeightPuller` does one fetch (and asks learners for their newest version, `newest_from`): every live holder of
  the run serves chunks (`LivePeers`), the manifest must be signed by a trusted learner (and an adapter-only one
  must name this node's base weights), and the loaded state goes to the sampler (a `WeightSink`), with the
  manifest's `AdapterSpec` for an adapter-only version.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractContextManager as ContextManager
from typing import Any, Protocol

import torch
from hivemind.p2p import P2P, PeerID

from swarmnode.backoff import Backoff
from swarmnode.diskspace import is_disk_full
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.manifest import AdapterSpec, WeightManifest
from swarmnode.protocol.reachability import RELAYED, by_dial_cost, dialable, reachability_of
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.liveness import ProvenAlive
from swarmnode.swarm.shard_window import DEFAULT_WINDOW, ShardWindow
from swarmnode.swarm.weights import (
    FetchError,
    FetchStats,
    ModelLayout,
    ProgressCallback,
    WeightFetcher,
    WeightStore,
    ping_holder,
)

logger = logging.getLogger(__name__)

Pointer = dict[str, Any]
NewestVersion = Callable[[], Awaitable["tuple[int, Pointer] | None"]]
Fetch = Callable[[int, Pointer], Awaitable[None]]
ProgressDisplay = Callable[[str], ContextManager[ProgressCallback]]  # description -> a (done, total) callback
DISK_RETRY_S = 5.0  # a full disk: how often a fetch looks for space again (statvfs, no network)
LIVE_WINDOW_S = 30.0  # a peer's proof of life counts this long (at least 4 heartbeats)


@contextlib.contextmanager
def no_progress(_description: str):
    yield lambda _done, _total: None


class WeightSink(Protocol):
    """Where fetched weights go: the sampler loop (swapped in between batches)."""

    def offer_weights(
        self,
        state: dict[str, torch.Tensor],
        version: int,
        lineage: str | None = None,
        adapter: AdapterSpec | None = None,
    ) -> None: ...


class WeightFollower:
    """Follows the run's newest version: one fetch at a time, backoff after failures (see the module docstring).

    `newest_version()` returns the newest announced (version, pointer) or None; `ask_learners()`, where given, the
    newest version the run's learners hold, asked of them directly, or None when none answered; `fetch(version,
    pointer)` loads that version into the sampler and raises on failure. `trusted` (the run's learner keys; empty:
    any learner) limits which learners' ack hints are followed.
    """

    def __init__(
        self,
        newest_version: NewestVersion,
        fetch: Fetch,
        *,
        trusted: Iterable[str] = (),
        backoff: Backoff | None = None,
        ask_learners: NewestVersion | None = None,
    ) -> None:
        self._newest_version = newest_version
        self._ask_learners = ask_learners
        self._fetch = fetch
        self.trusted = frozenset(trusted)
        self.backoff = backoff or Backoff(base=0.5, cap=30.0)
        self.newest = -1  # the newest version seen announced or told in an ack
        self.offered = -1  # the newest version fetched and handed to the sampler
        self.failures = 0  # fetches that failed, in total
        self.last_error: str | None = None  # why the last fetch failed (None after a success)
        self._task: asyncio.Task | None = None

    @property
    def idle(self) -> bool:
        """No fetch is running (a newer version waits for the current fetch to end)."""
        return self._task is None or self._task.done()

    def lag(self, held: int) -> int:
        """Versions between `held` and the newest seen (0 when none is newer)."""
        return max(0, self.newest - held)

    def hint(self, version: int, publisher: str | None) -> None:
        """A learner's ack told `version`: fetch it from that learner now (its manifest must be signed by it)
        rather than at the next DHT look, unless it is not newer, the learner is not trusted, a fetch is
        running, or the backoff after a failure has not passed."""
        if publisher is None or (self.trusted and publisher not in self.trusted):
            return  # an untrusted claim neither starts a fetch nor makes the sampler think it is stale
        self.newest = max(self.newest, version)
        if version <= self.offered or not self.idle or not self.backoff.ready():
            return
        self._start(version, {"publisher": publisher})

    async def poll(self, *, wait: bool = False, timeout: float = 60.0, direct: bool = False) -> None:
        """Look up the newest announced version and fetch it if newer than ours. With `wait`, block until it is
        loaded or `timeout` passes, first sitting out a pending backoff (never retrying a failing fetch at once).
        `direct`: ask the learners themselves (`ask_learners`) rather than the DHT, which is looked up only when
        none of them answers."""
        found = await self._ask_learners() if direct and self._ask_learners is not None else None
        if found is None:
            found = await self._newest_version()
        if found is None:
            return
        version, pointer = found
        self.newest = max(self.newest, version)
        if version <= self.offered:
            return
        deadline = time.monotonic() + timeout
        if self.idle:
            if not self.backoff.ready():
                if not wait:
                    return
                await asyncio.sleep(min(self.backoff.remaining(), timeout))
            self._start(version, pointer)
        if wait and self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                logger.warning("version %d not fetched within %.0f s", version, timeout)

    async def close(self) -> None:
        """Cancel a running fetch."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _start(self, version: int, pointer: Pointer) -> None:
        self._task = asyncio.create_task(self._run(version, pointer))

    async def _run(self, version: int, pointer: Pointer) -> None:
        try:
            await self._fetch(version, pointer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # FetchError, or a holder listing / disk failure: all retried after a backoff
            if is_disk_full(exc):  # said once by the store's SpaceWatch; tried again soon, not after a backoff
                self.backoff.hold(DISK_RETRY_S)
                return
            self.failures += 1
            delay = self.backoff.failure()
            why = str(exc) if isinstance(exc, FetchError) else f"{type(exc).__name__}: {exc}"
            self.last_error = f"fetching version {version} failed ({why})"
            logger.warning("fetching version %d failed (%s); next try in %.1f s", version, why, delay)
            return
        self.backoff.success()
        self.last_error = None
        self.offered = max(self.offered, version)
        self.newest = max(self.newest, version)


def with_designated(records: list, designated: list) -> list:
    """`records` (the shared peers key's) with the designated learners' own records in place of, or beside, theirs."""
    mine = {r.peer_id for r in designated}
    return [*designated, *(r for r in records if r.peer_id not in mine)]


class LivePeers:
    """The run's live peer records as of the last heartbeat: who the learners are, who may hold weights.
    Re-read from the DHT only when older than `max_age`. A bounded part of the run is read, whatever its size:
    the designated learners from their own small keys (or, with none named, the run's index of learners) on every
    refresh, and a sample of about `network.peer_sample` other records, candidates for weight holders, kept by a
    `ShardWindow`: a few shards a refresh (`window`) in a rotation over all of them, so a read stays bounded
    whatever the run's size and over a few refreshes every part of the run is seen.

    A record alone makes no peer a holder or a send target (a throwaway key signs as many as it likes): a peer is
    picked only once proven alive (`alive`: it answered us, or our p2pd holds a connection to it, within
    `live_window` seconds; unproven candidates are probed in the background). The run's designated learners
    (`designated`, read from their own keys) are always eligible: they are the trust root."""

    def __init__(
        self,
        dht: SwarmDHT,
        me: str,
        max_age: float,
        designated: Iterable[str] = (),
        *,
        live_window: float | None = None,
        alive: ProvenAlive | None = None,
        use_relay: bool = True,
        sample: int | None = None,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        self.dht, self.me, self.max_age = dht, me, max_age
        self.use_relay = use_relay  # False: this node cannot dial relayed peers (no circuit transport in its p2pd)
        self.relayed_only: list[str] = []  # learners left out, as of the last `learners()`: reached only by relay
        self.designated = list(designated)  # trust.learner_keys: read from their own keys too (no flood hides them)
        self.sample = sample or dht.cfg.network.peer_sample
        run_id = dht.cfg.run_id
        self.alive = alive or ProvenAlive(
            live_window or max(LIVE_WINDOW_S, 4 * max_age), probe=lambda peer: ping_holder(dht.p2p, run_id, peer)
        )
        self._records: list = []
        self._acked: dict[str, float] = {}  # learner -> monotonic time it last acked our groups (`acked`)
        self.window = ShardWindow(dht.shards, self.sample, window=window, every=self.SHARED_EVERY)
        self._read_at = -float("inf")

    SHARED_EVERY = 5  # refreshes between reads of the sample once it is full (a large run)

    @property
    def shards_read(self) -> int:
        """Shards the last refresh read for the sample."""
        return len(self.window.last_read)

    async def refresh(self) -> None:
        """Re-read the learners (and now and then a sample of the others); peers connected to us now are proven,
        unproven candidates are probed. A learner this read missed keeps its last record (`_missed_learners`)."""
        if self.designated:
            read = await self.dht.designated_learners(self.designated)
        else:
            read = await self.dht.learners(leaving=True)  # a learner seen leaving is not kept as missed
        learners = [r for r in read if r.state == "up"] + self._missed_learners(read)
        shared = await self.window.look(self.dht.read_shards, self.dht.sample_shards)
        self._records = with_designated(shared, learners)
        self._read_at = time.monotonic()
        candidates = {r.peer_id for r in self._records if r.peer_id != self.me and r.role in ("learner", "sampler")}
        connected = {str(info.peer_id) for info in await self.dht.p2p.list_peers()}
        self.alive.mark(candidates & connected)
        self.alive.refresh(candidates)

    def _missed_learners(self, found: list) -> list:
        """The learners of the last read that this one (`found`) missed, kept while their record is younger than
        the live window or they answered us within it (acked our groups, served chunks): a DHT read that timed out
        under a flood, or the record of a learner too starved of CPU to heartbeat in time, does not pause a
        sampler. A learner this read found leaving is not kept."""
        seen = {r.peer_id for r in found}
        return [
            r
            for r in self._records
            if r.role == "learner"
            and r.peer_id not in seen
            and (not self.designated or r.peer_id in self.designated)
            and (r.age() <= self.alive.window or self.alive.alive(r.peer_id) or self.taking(r.peer_id))
        ]

    def acked(self, peer: object) -> None:
        """`peer` acknowledged our groups just now (any answer on the authenticated push stream): a send target
        for the live window whatever its record's age or a probe that timed out on a machine short of CPU. As a
        weight holder it stays judged by `alive` (a holder that stalled a fetch waits out its failure)."""
        now = time.monotonic()
        self._acked[str(peer)] = now
        if len(self._acked) > 64:  # only learners ack: a handful; forget the silent ones
            self._acked = {p: t for p, t in self._acked.items() if now - t <= self.alive.window}

    def taking(self, peer: str) -> bool:
        """Whether `peer` acked our groups within the live window."""
        return time.monotonic() - self._acked.get(str(peer), -float("inf")) <= self.alive.window

    def proven(self, peers: Iterable[object]) -> None:
        """`peers` (ids or PeerIDs) just answered us: a fetch's holders, learners that told their version."""
        self.alive.mark(str(p) for p in peers)

    def failed(self, peers: Iterable[object]) -> None:
        """`peers` failed us in a fetch (stalled, broke the protocol): not holders until their wait is over
        (`ProvenAlive.fail`); the designated learners stay eligible."""
        self.alive.fail(str(p) for p in peers)

    def _eligible(self, record) -> bool:
        return record.peer_id in self.designated or self.alive.alive(record.peer_id)

    def eligible(self, records: list) -> list:
        """The records of designated learners and of peers proven alive."""
        return [r for r in records if self._eligible(r)]

    async def close(self) -> None:
        """Stop a running probe round."""
        await self.alive.close()

    async def _current(self) -> list:
        if time.monotonic() - self._read_at > self.max_age:
            await self.refresh()
        return self._records

    async def learners(self) -> list[PeerID]:
        """Learners that accept groups: their record holds a version (-1 while a learner loads its model and
        opens its inbox, when a push would only fail and back off), someone can dial them (not client-only; not
        relayed when this node does not use relays: those are in `relayed_only`), and they are designated, proven
        alive or acking our groups."""
        targets = send_targets([r for r in await self._current() if self._eligible(r) or self.taking(r.peer_id)])
        self.relayed_only = [] if self.use_relay else [r.peer_id for r in targets if reachability_of(r) == RELAYED]
        return [PeerID.from_base58(r.peer_id) for r in targets if r.peer_id not in self.relayed_only]

    async def holders(self) -> list[PeerID]:
        """Live learners and samplers but us, designated or proven alive: a peer fetching the same version right
        now serves the chunks it already has (holders answer `have` with their chunk maps), so samplers help each
        other. Peers nobody can dial are left out, relayed ones come last (`weight_holders`)."""
        found = weight_holders(self.eligible(await self._current()), self.me)
        return [PeerID.from_base58(r.peer_id) for r in found if self.use_relay or reachability_of(r) != RELAYED]


def send_targets(records: list) -> list:
    """The learner records groups may be pushed to: live with a version, and dialable (directly or relayed)."""
    return [r for r in records if r.role == "learner" and r.version >= 0 and dialable(r)]


def weight_holders(records: list, me: str) -> list:
    """The peers (learners and samplers but `me`) a weight fetch may ask for chunks: dialable ones, direct first
    and relayed last (a relayed chunk also crosses the bootstrap's relay)."""
    return by_dial_cost([r for r in records if r.peer_id != me and r.role in ("learner", "sampler")])


class WeightPuller:
    """One version fetch for a `WeightFollower`: chunks from every live holder into the store, verified, then
    the state handed to `sink`. A manifest that does not fit `layout` (the node's model) is refused. `progress`
    shows long fetches to a person (the caller's display, e.g. `swarmnode.observe.progress.fetch_progress`); `hold()` gives
    seconds to hold the weights back (`--simulate-delay`)."""

    def __init__(
        self,
        p2p: P2P,
        store: WeightStore,
        peers: LivePeers,
        sink: WeightSink,
        *,
        trusted: Iterable[str] = (),
        emit: Callable[[str], None] = print,
        layout: ModelLayout | None = None,
        progress: ProgressDisplay = no_progress,
        hold: Callable[[], float] = lambda: 0.0,
    ) -> None:
        self.p2p, self.store, self.peers, self.sink = p2p, store, peers, sink
        self.layout = layout
        self.trusted = list(trusted)
        self.emit, self.progress, self.hold = emit, progress, hold
        self.last_stats: FetchStats | None = None
        self.seed_chunks: collections.Counter[str] = (
            collections.Counter()
        )  # "asked", "unheard": a publisher's chunks over every fetch

    async def newest_from(
        self, learners: Iterable[PeerID], timeout: float = 2.0, grace: float = 0.25
    ) -> tuple[int, Pointer] | None:
        """The newest version `learners` hold, asked of each of them at once (one request each, no DHT look):
        (version, pointer holding its manifest, so the fetch does not ask for it again), or None when none of them
        answered with a valid one within `timeout`. Once one has answered, the others get `grace` seconds more (a
        learner that died does not hold up every batch). Each learner vouches only for versions it signed, unless
        the run names its learner keys."""
        answered: list[PeerID] = []

        async def ask(learner: PeerID) -> WeightManifest | None:
            fetcher = WeightFetcher(
                self.p2p, self.store, self.trusted or [str(learner)], layout=self.layout, request_timeout=timeout
            )
            manifest = await fetcher.newest_manifest(learner)
            answered.append(learner)
            return manifest

        pending = {asyncio.ensure_future(ask(learner)) for learner in learners}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        manifests: list[WeightManifest] = []
        try:
            while pending and loop.time() < deadline:
                done, pending = await asyncio.wait(
                    pending, timeout=deadline - loop.time(), return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    if isinstance(task.exception(), InvalidRecord):
                        logger.warning("weights: a learner's newest manifest was refused: %s", task.exception())
                    elif task.exception() is None and (manifest := task.result()) is not None:
                        manifests.append(manifest)
                if manifests:
                    deadline = min(deadline, loop.time() + grace)
        finally:
            for task in pending:
                task.cancel()
        self.peers.proven(answered)
        if not manifests:
            return None
        newest = max(manifests, key=lambda m: m.version)
        return newest.version, {"publisher": newest.publisher, "total_bytes": newest.total_bytes, "manifest": newest}

    async def __call__(self, version: int, pointer: Pointer) -> None:
        publisher = pointer.get("publisher")
        publisher = publisher if isinstance(publisher, str) else None
        allowed = self.trusted or ([publisher] if publisher else [])
        try:
            ids = await self.peers.holders()
        except Exception as exc:  # a DHT hiccup: the publisher alone still serves the version
            logger.info("could not list weight holders (%s); fetching from the publisher", exc)
            ids = []
        if publisher and publisher not in {str(i) for i in ids} and publisher not in self.peers.relayed_only:
            ids.append(PeerID.from_base58(publisher))  # (not one this node cannot dial: relayed, relaying off)
        fetcher = WeightFetcher(self.p2p, self.store, allowed, layout=self.layout)
        known = pointer.get("manifest")  # from `newest_from`: checked again by the fetch, not asked for again
        with self.progress(f"weights v{version}") as progress:
            await fetcher.fetch(
                ids, version, progress=progress, manifest=known if isinstance(known, WeightManifest) else None
            )
        if (stats := fetcher.last_stats) is not None and stats.version == version:
            self.last_stats = stats
            self.seed_chunks.update(asked=stats.seed_chunks, unheard=stats.seed_chunks_unheard)
            self.peers.proven(stats.chunks_by_holder or ())  # they served chunks: alive
            self.peers.failed(stats.lost_holders)  # a stalling holder is not picked again for a while
            if stats.seconds >= 2.0:  # worth a line (a small model's fetches take milliseconds)
                self.emit(
                    f"fetched weights v{version}: {stats.fetched_bytes / 1e6:,.0f} MB in {stats.seconds:.1f} s "
                    f"({stats.bytes_per_second / 1e6:,.0f} MB/s), {stats.reused_bytes / 1e6:,.0f} MB reused, "
                    f"from {len(stats.chunks_by_holder)} peer(s)"
                )
        if (hold := self.hold()) > 0:
            await asyncio.sleep(hold)
        state = await asyncio.to_thread(self.store.state_dict, version)
        manifest = self.store.manifest(version)
        self.sink.offer_weights(state, version, lineage=publisher, adapter=manifest.adapter if manifest else None)
