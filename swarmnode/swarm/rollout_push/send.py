"""The sending end of rollout pushes: a bounded outbox per destination, acks, retries with backoff."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from hivemind.p2p import P2P, PeerID

from swarmnode.backoff import Backoff
from swarmnode.protocol.codec import MAX_VERSION, InvalidRecord
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.protocol.run_settings import SETTINGS_STATUS
from swarmnode.swarm.frames import read_control, write_frame, write_frames
from swarmnode.swarm.rollout_push.credit import told_credit, told_wait
from swarmnode.swarm.rollout_push.streams import CLOSING_STATUSES, FULL, RETRY_STATUSES, pull_protocol, push_protocol

logger = logging.getLogger(__name__)
SPREAD_OUTBOX = 16  # with `spread`, a destination holding this many unacknowledged groups gets no more while another
# has room (a slow or stalling learner's share goes to the others)


class _Link:
    """One destination: its bounded outbox and the task that drains it."""

    def __init__(self, peer: PeerID, maxlen: int):
        self.peer = peer
        self.created = time.monotonic()
        self.last_ack: float | None = None  # when this destination last answered (proof that it is alive)
        self.outbox: collections.deque[tuple[str, bytes, float]] = collections.deque()
        self.maxlen = maxlen
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.retiring = False
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.queued = 0  # groups queued to this destination so far (spread mode balances on it)
        self.credit: int | None = None  # groups its last ack invited beyond those acked (None: it told none)
        self.full_wait = 0.0  # seconds its last "full" ack told us to wait before pushing again (0: it told none)

    def invites(self) -> int:
        """Groups this destination invites now: its last credit less the groups still waiting for its ack."""
        return 0 if self.credit is None else max(0, self.credit - len(self.outbox))

    def close_stream(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class RolloutSender:
    """Pushes groups to destinations (the run's learners; in broadcast mode every peer that wants rollouts).

    Each destination has a bounded outbox (oldest dropped and counted when full) drained by one task over a
    persistent stream: up to `window` groups written back to back, then their acks read in order (one group in
    flight per round trip when `window` is 1); an ack per group, exponential backoff with jitter on failures
    and on "rate_limited"/"busy"; "full" (the learner holds enough for now) is resent after `full_wait` seconds,
    flat: the learner is healthy and will want groups again within a step or two; or after the wait the "full"
    ack told (`"w"`: with more senders than a step takes, about half the time until this sender's turn). A group
    leaves the outbox only when its own ack says "ok" or "duplicate", so a failure part-way through a window
    resends the rest (the receiver's dedup keeps it exactly-once). A bounded ring of recent groups is served to
    learners that pull.

    Self-declared membership is not trusted: a destination counts as alive only while it answers (an ack within
    `alive_window` seconds, or a new link still within its first window). `pending`, the sampler's
    backpressure, counts only live destinations' outboxes, so a peer record with no process behind it (or a
    learner that stopped answering) cannot stall generation; its own outbox stays bounded and it is still tried.

    Credits (`credit`): a learner's acks may tell how many more groups it invites; `invited` sums what the
    answering destinations invite now, and the sampler paces its generation by it.

    With `spread`, each group goes to one destination only (a run's several learners, the run card's
    `trust.learner_keys`, each train on their own share): the answering destination sent the fewest groups, among
    those whose outbox holds under `SPREAD_OUTBOX` (else the shortest outbox). The credit a learner claims paces
    generation only; it never draws a larger share, so a learner key claiming a huge credit, or holding groups
    "full", takes its even share and no more. A destination added later starts level with the fewest sent.
    """

    def __init__(
        self,
        p2p: P2P,
        run_id: str,
        *,
        outbox_size: int = 1024,
        recent_size: int = 1024,
        ack_timeout: float = 10.0,
        base_backoff: float = 0.05,
        max_backoff: float = 5.0,
        alive_window: float = 30.0,
        stream: str = "rollouts",
        spread: bool = False,
        window: int = 8,
        full_wait: float = 0.05,
    ):
        if window < 1:
            raise ValueError("window must be at least 1")
        self.p2p = p2p
        self.window = window
        self.spread = spread
        self.alive_window = alive_window
        self.run_id = run_id
        self.stream = stream
        self.outbox_size = outbox_size
        self.ack_timeout = ack_timeout
        self.base_backoff, self.max_backoff = base_backoff, max_backoff
        self.full_wait = full_wait
        self.recent: collections.deque[tuple[float, str, bytes]] = collections.deque(maxlen=recent_size)
        self.delivered = 0
        self.dropped = 0
        self.unrouted = 0  # groups sent while there was no destination: kept in the recent ring only
        self.retries = 0
        self.statuses: collections.Counter[str] = collections.Counter()
        self.latencies: collections.deque[float] = collections.deque(maxlen=10_000)  # enqueue -> ack, seconds
        self.on_delivered: Callable[[str, str, str], None] | None = None  # (peer, group id, status)
        self.on_saturated: Callable[[Any], None] | None = None  # an ack's `s`: prompt id -> solved | failed
        self.on_settings: Callable[[str, Any], None] | None = None  # (peer, the run's values): a "settings" ack
        self.newest_hint = -1  # the highest policy version a destination's ack told
        self.hint_peer: str | None = None  # the destination (stream-authenticated peer id) that told it
        self.last_error: str | None = None  # the last failed push: "<peer>: <error>" (cleared by an ack)
        self._links: dict[str, _Link] = {}
        self._answered = asyncio.Event()  # set by each ack (for `wait_answer`)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def start(self) -> None:
        """Bind to the running loop and serve the pull handler."""
        self._loop = asyncio.get_running_loop()
        await self.p2p.add_binary_stream_handler(pull_protocol(self.run_id, self.stream), self._handle_pull)

    @property
    def pending(self) -> int:
        """Groups waiting for destinations that answer (see the class docstring)."""
        now = time.monotonic()
        return sum(len(link.outbox) for link in self._links.values() if self._alive(link, now))

    @property
    def invited(self) -> int | None:
        """Groups the answering destinations invite now beyond those outstanding (see `credit`), or None while
        none of them has told a credit (learners that do not pace their samplers)."""
        now = time.monotonic()
        told = [link for link in self._links.values() if self._alive(link, now) and link.credit is not None]
        return sum(link.invites() for link in told) if told else None

    @property
    def queued(self) -> int:
        """Groups waiting for any destination, answering or not."""
        return sum(len(link.outbox) for link in self._links.values())

    def alive_destinations(self) -> list[str]:
        """Destinations that answered within `alive_window` (or are new)."""
        now = time.monotonic()
        return [name for name, link in self._links.items() if self._alive(link, now)]

    def _alive(self, link: _Link, now: float) -> bool:
        return now - (link.last_ack if link.last_ack is not None else link.created) <= self.alive_window

    def set_destinations(self, peers: Iterable[PeerID]) -> None:
        """Peers new groups go to; a removed peer's outbox is still drained, then its link ends."""
        self._call(self._set_destinations, list(peers))

    def send(self, group: RolloutGroup) -> None:
        """Queue `group` for every destination; never blocks; safe from any thread."""
        self._call(self._send, group.group_id, group.encode(), group.created_at)

    def send_encoded(self, group_id: str, data: bytes, created_at: float | None = None) -> None:
        """Queue an already-encoded group (used by benchmarks and relays)."""
        self._call(self._send, group_id, data, time.time() if created_at is None else created_at)

    async def wait_answer(self, timeout: float) -> bool:
        """Wait until a destination acks a group or tells a credit (True), or `timeout` seconds pass (False)."""
        self._answered.clear()
        try:
            await asyncio.wait_for(self._answered.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def flush(self, timeout: float) -> bool:
        """Wait until every outbox is empty (True) or `timeout` passes (False)."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return not self.pending

    async def close(self, flush_timeout: float = 0.0) -> None:
        """Optionally flush, then stop every link (what is still queued is dropped and counted)."""
        if flush_timeout > 0:
            await self.flush(flush_timeout)
        self._closed = True
        for link in list(self._links.values()):
            self.dropped += len(link.outbox)
            link.outbox.clear()
            if link.task is not None:
                link.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await link.task
            link.close_stream()
        self._links.clear()
        with contextlib.suppress(Exception):
            await self.p2p.remove_binary_stream_handler(pull_protocol(self.run_id, self.stream))

    # -- internals (on the loop) --------------------------------------------------------------------------
    def _call(self, fn: Callable, *args: Any) -> None:
        if self._loop is None:
            raise RuntimeError("RolloutSender.start() must be awaited first")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            fn(*args)
        else:
            self._loop.call_soon_threadsafe(fn, *args)

    def _set_destinations(self, peers: list[PeerID]) -> None:
        wanted = {str(p): p for p in peers}
        for name, link in self._links.items():
            link.retiring = name not in wanted
            link.wake.set()
        for name, peer in wanted.items():
            if name not in self._links:
                level = min((other.queued for other in self._links.values()), default=0)
                link = self._links[name] = _Link(peer, self.outbox_size)
                link.queued = level  # level with the fewest sent: a newcomer does not take every group to catch up
                link.task = asyncio.ensure_future(self._drain(link))

    def _send(self, group_id: str, data: bytes, created_at: float) -> None:
        if self._closed:
            self.dropped += 1
            return
        self.recent.append((created_at, group_id, data))
        now = time.monotonic()
        links = [link for link in self._links.values() if not link.retiring]
        if not links:  # nobody to push to: only a peer that pulls the recent ring can still get it
            self.unrouted += 1
        if self.spread and len(links) > 1:
            answering = [link for link in links if self._alive(link, now)] or links
            open_ = [link for link in answering if len(link.outbox) < SPREAD_OUTBOX]
            links = [
                min(open_, key=lambda link: (link.queued, len(link.outbox)))
                if open_
                else min(answering, key=lambda link: (len(link.outbox), link.queued))
            ]
        for link in links:
            link.queued += 1
            if len(link.outbox) >= link.maxlen:
                link.outbox.popleft()
                self.dropped += 1
                logger.warning(
                    "rollouts: outbox to %s full; dropped the oldest group (%d dropped so far)",
                    str(link.peer)[-8:],
                    self.dropped,
                )
            link.outbox.append((group_id, data, now))
            link.wake.set()

    async def _drain(self, link: _Link) -> None:
        backoff = Backoff(self.base_backoff, self.max_backoff)
        while not self._closed:
            if not link.outbox:
                if link.retiring:
                    break
                link.wake.clear()
                await link.wake.wait()
                continue
            batch = list(itertools.islice(link.outbox, self.window))
            statuses: list[str] = []
            try:
                await self._push(link, batch, statuses)
            except Exception as exc:  # unreachable, reset, timeout, protocol error: reconnect and retry
                link.close_stream()
                logger.debug("rollouts: push to %s failed: %s %s", str(link.peer)[-8:], type(exc).__name__, exc)
                first = (str(exc).splitlines() or [""])[0][:160]
                self.last_error = f"push to {str(link.peer)[-8:]}: {type(exc).__name__} {first}".strip()
            retry = len(statuses) < len(batch)  # the stream failed before every ack came
            full = False
            for item, status in zip(batch, statuses):
                if status == FULL:  # kept in the outbox; no failure counted
                    full = True
                    self.statuses[FULL] += 1
                    continue
                if status in RETRY_STATUSES or status in CLOSING_STATUSES:
                    if status in CLOSING_STATUSES:
                        link.close_stream()
                    if status == "banned" or status == "oversized":  # retrying cannot help: give up on this group
                        self._finish(link, item, status)
                    retry = True
                    continue
                self._finish(link, item, status)
            if retry:
                self.retries += 1
                await asyncio.sleep(backoff.failure())
                continue
            backoff.success()
            if full:  # the learner's told wait (our turn is further off), else a short flat one
                await asyncio.sleep(max(self.full_wait, link.full_wait))
        link.close_stream()
        if self._links.get(str(link.peer)) is link:
            del self._links[str(link.peer)]

    def _finish(self, link: _Link, item: tuple[str, bytes, float], status: str) -> None:
        group_id, _, queued_at = item
        with contextlib.suppress(ValueError):  # already gone: the outbox dropped it as the oldest meanwhile
            link.outbox.remove(item)
        self.statuses[status] += 1
        self._answered.set()
        if status in ("ok", "duplicate"):
            self.delivered += 1
            self.latencies.append(time.monotonic() - queued_at)
        if self.on_delivered is not None:
            self.on_delivered(str(link.peer), group_id, status)

    async def _push(self, link: _Link, batch: list[tuple[str, bytes, float]], statuses: list[str]) -> None:
        """Write `batch`'s groups back to back, then read their acks in order into `statuses` (as they come: a
        failure part-way leaves the acks read so far). An ack that ends the stream's usefulness (a closing
        status) stops the reading: the receiver reads nothing after it."""
        if link.writer is None:
            _, link.reader, link.writer = await asyncio.wait_for(
                self.p2p.call_binary_stream_handler(link.peer, push_protocol(self.run_id, self.stream)),
                self.ack_timeout,
            )
        assert link.reader is not None  # opened with the writer
        await write_frames(link.writer, [data for _, data, _ in batch])
        for _ in batch:
            ack = await asyncio.wait_for(read_control(link.reader), self.ack_timeout)
            if ack is None:
                raise ConnectionError("stream closed before the ack")
            link.last_ack = time.monotonic()
            self.last_error = None
            status = ack.get("status")
            if not isinstance(status, str):
                raise InvalidRecord("ack without a status")
            hint = ack.get("v")
            if isinstance(hint, int) and not isinstance(hint, bool) and self.newest_hint < hint <= MAX_VERSION:
                self.newest_hint, self.hint_peer = hint, str(link.peer)
            if (credit := told_credit(ack)) is not None:
                link.credit = credit
                self._answered.set()
            if status == FULL:
                link.full_wait = told_wait(ack)
            if status == SETTINGS_STATUS and self.on_settings is not None:
                self.on_settings(str(link.peer), ack.get("run"))
            if (told := ack.get("s")) and self.on_saturated is not None:  # prompts come back all-solved/failed
                self.on_saturated(told)
            statuses.append(status)
            if status in CLOSING_STATUSES:
                return

    async def _handle_pull(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await asyncio.wait_for(read_control(reader), 10.0)
            if req is None:
                return
            since, limit = req.get("since"), req.get("limit")
            if not isinstance(since, (int, float)) or not isinstance(limit, int) or limit < 0:
                raise InvalidRecord("pull request needs numeric since and int limit")
            items = [data for created, _, data in list(self.recent) if created > since][-min(limit, 65536) :]
            for data in items:
                await write_frame(writer, data)
            await write_frame(writer, b"")
            await asyncio.wait_for(read_control(reader), 30.0)  # the puller's "bye": now closing is safe
        except InvalidRecord as exc:
            logger.warning("rollouts: bad pull request from %s: %s", str(info.peer_id)[-8:], exc)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()
