"""Rollout groups between peers over hivemind binary streams: send with acks and retries, receive with
validation, dedup, per-peer rate limits and bans, and a pull path for learners that joined late.

Why direct stream pushes and not p2pd's gossipsub (also for SAPO's broadcast mode): hivemind does not expose
gossipsub, the daemon silently drops messages over 1 MiB, and gossipsub has no acknowledgement, so a sender
cannot retry, back off, or learn that a learner refused a group (quota, stale). A push per destination gives
exactly-once delivery (ack + receiver dedup), per-peer backpressure, and p99 latency well under the 200 ms
target on loopback (bench/data_plane.py); a swarm-wide broadcast is the same push to every peer that wants
rollouts, which at RL group rates (a few per second per sampler) costs little.

Wire format, both directions: frames of an 8-byte big-endian length and a payload.
- push stream `swarmnode/<run>/rollouts/1` (persistent): sender writes an encoded RolloutGroup, receiver answers
  {"id": group id or "", "status": reason, "v": the learner's policy version (optional)}. Final statuses: "ok",
  "duplicate", the buffer's own refusals ("quota", "stale", ...), "invalid"; retried after backoff:
  "rate_limited", "busy". After "oversized", "truncated" or "banned" the receiver closes the stream. The
  version in a learner's acks lets its samplers fetch that version at once (from the learner the stream
  authenticates, manifest signed by it) instead of at their next DHT look, so weights follow a fast learner
  within one ack (Echo's push-pull), not a heartbeat.
- pull stream `swarmnode/<run>/rollouts-pull/1`: learner writes {"since": unix time, "limit": n}; the sampler
  answers with up to n encoded groups from its recent ring, newer than `since`, then an empty frame; the learner
  writes {"op": "bye"} before anyone closes (closing right after the last write truncated QUIC streams).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import os
import random
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterable

from hivemind.p2p import P2P, PeerID

from swarmnode.protocol.codec import InvalidRecord, pack
from swarmnode.protocol.codec import MAX_VERSION
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits
from swarmnode.swarm.frames import read_control, read_header, write_frame

logger = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({"rate_limited", "busy"})
CLOSING_STATUSES = frozenset({"oversized", "truncated", "banned"})


def push_protocol(run_id: str, stream: str = "rollouts") -> str:
    return f"swarmnode/{run_id}/{stream}/1"


def pull_protocol(run_id: str, stream: str = "rollouts") -> str:
    return f"swarmnode/{run_id}/{stream}-pull/1"


# ------------------------------------------------------------------------------------------------- receiving
class TokenBucket:
    """`rate` tokens per second, at most `burst` saved up."""

    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class SeenIds:
    """Bounded set of accepted group ids, optionally journaled to disk so a restarted receiver stays exactly-once."""

    def __init__(self, capacity: int, journal: str | Path | None = None):
        self.capacity = capacity
        self._ids: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._file = None
        self._path: Path | None = None
        self._lines = 0
        if journal is not None:
            path = self._path = Path(journal)
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                data = path.read_bytes()
                complete = data[: data.rfind(b"\n") + 1]  # a crash may have cut the last line
                if len(complete) != len(data):
                    with open(path, "r+b") as f:
                        f.truncate(len(complete))
                lines = complete.decode(errors="replace").splitlines()
                self._lines = len(lines)
                for line in lines[-capacity:]:
                    self._remember(line)
            self._file = open(path, "a", buffering=1)

    def __contains__(self, group_id: str) -> bool:
        return group_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, group_id: str) -> None:
        self._remember(group_id)
        if self._file is not None:
            self._file.write(group_id + "\n")
            self._file.flush()
            self._lines += 1
            if self._lines > 2 * self.capacity:
                self._compact()

    def _compact(self) -> None:
        """Rewrite the journal with only the ids still remembered (atomic rename)."""
        assert self._path is not None and self._file is not None
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text("".join(i + "\n" for i in self._ids))
        self._file.close()
        os.replace(tmp, self._path)
        self._file = open(self._path, "a", buffering=1)
        self._lines = len(self._ids)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _remember(self, group_id: str) -> None:
        self._ids[group_id] = None
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)


class RolloutReceiver:
    """Accepts rollout groups from peers: size limit, rate limit, decode+verify, dedup, hand over, ack.

    `on_group(group) -> status` is the learner's buffer.add; "ok" means accepted (the id is then
    remembered and journaled). With `durable`, an "ok" group's bytes are awaited into it (the learner's group
    journal) before the ack, so an acknowledged group survives a crash. Peers that send garbage (undecodable,
    bad signature, oversized, truncated) collect strikes; `strikes_to_ban` strikes within `ban_seconds` get the
    peer ignored for `ban_seconds`; a ban acts on stream open and before any body is read.

    Denial of service: a message is decoded and verified in a small thread pool (`decode_workers`, never on the
    event loop, so heartbeats and acks go on), with element counts bounded while decoding (see
    `RolloutLimits`); one peer may hold at most `max_streams_per_peer` push streams at once (more are answered
    "busy" and closed before anything is read), so one identity cannot queue unbounded work.

    `stream` and `decode` carry another record over the same machinery (SAPO's text groups: stream
    "text-rollouts"); a decoded record has `group_id`, `run_id` and its signer `sampler_id`.
    """

    def __init__(self, run_id: str, on_group: Callable[[RolloutGroup], str], limits: RolloutLimits, *,
                 rate: float = 50.0, burst: float = 100.0, strikes_to_ban: int = 3, ban_seconds: float = 60.0,
                 seen_capacity: int = 200_000, journal: str | Path | None = None, idle_timeout: float = 300.0,
                 read_timeout: float = 30.0, version: Callable[[], int] | None = None,
                 durable: Callable[[RolloutGroup, bytes], Awaitable[None]] | None = None,
                 max_streams_per_peer: int = 4, decode_workers: int = 2, stream: str = "rollouts",
                 decode: Callable[[bytes], Any] | None = None):
        self.run_id = run_id
        self.stream = stream
        self.decode = decode or (lambda body: RolloutGroup.decode(body, limits))
        self.on_group = on_group
        self.durable = durable
        self.version = version  # the learner's current policy version, told in every ack
        self.limits = limits
        self.max_message_bytes = limits.max_bytes
        self.rate, self.burst = rate, burst
        self.strikes_to_ban, self.ban_seconds = strikes_to_ban, ban_seconds
        self.idle_timeout, self.read_timeout = idle_timeout, read_timeout
        self.max_streams_per_peer = max_streams_per_peer
        self.seen = SeenIds(seen_capacity, journal)
        self.accepted = 0
        self.statuses: collections.Counter[str] = collections.Counter()
        self.rejections: collections.Counter[str] = collections.Counter()  # reason -> count (garbage only)
        self._buckets: dict[str, TokenBucket] = {}
        self._strikes: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self._banned_until: dict[str, float] = {}
        self._last_log: dict[tuple[str, str], float] = {}
        self._streams: collections.Counter[str] = collections.Counter()  # open push streams per peer
        self._decoder = concurrent.futures.ThreadPoolExecutor(decode_workers, thread_name_prefix="rollout-decode")
        self._decode_slots = asyncio.Semaphore(decode_workers)

    async def start(self, p2p: P2P) -> None:
        """Register the push handler on `p2p`."""
        await p2p.add_binary_stream_handler(push_protocol(self.run_id, self.stream), self._handle_push)

    def close(self) -> None:
        self.seen.close()
        self._decoder.shutdown(wait=False, cancel_futures=True)

    def is_banned(self, peer: str) -> bool:
        until = self._banned_until.get(peer)
        if until is None:
            return False
        if time.monotonic() >= until:
            del self._banned_until[peer]
            return False
        return True

    def recent_offenders(self) -> list[str]:
        """Peers that sent invalid data within the last `ban_seconds` (banned or not), most recent first."""
        now = time.monotonic()
        last = {p: d[-1] for p, d in self._strikes.items() if d and d[-1] >= now - self.ban_seconds}
        for peer, until in self._banned_until.items():
            if until > now:
                last[peer] = max(last.get(peer, 0.0), until - self.ban_seconds)
        return sorted(last, key=lambda p: -last[p])

    # -- the push path ------------------------------------------------------------------------------------
    async def _handle_push(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = str(info.peer_id)
        if self._streams[peer] >= self.max_streams_per_peer:  # before reading anything
            self._count("busy", peer, f"over {self.max_streams_per_peer} concurrent streams")
            with contextlib.suppress(ConnectionError, OSError):
                await self._ack(writer, "", "busy")
                await _linger(reader, 1.0)  # closing at once can drop the ack; nothing read is kept
            writer.close()
            return
        self._streams[peer] += 1
        try:
            while True:
                if self.is_banned(peer):
                    await self._refuse_banned(reader, writer)
                    break
                n = await asyncio.wait_for(read_header(reader), self.idle_timeout)
                if n is None:
                    break
                if self.is_banned(peer):  # banned while this stream waited: the body is never read
                    await self._refuse_banned(reader, writer)
                    break
                if n > self.max_message_bytes:
                    self._strike(peer, f"oversized message ({n} bytes > {self.max_message_bytes})")
                    await self._ack(writer, "", "oversized")
                    await _linger(reader)
                    break
                try:
                    body = await asyncio.wait_for(reader.readexactly(n), self.read_timeout)
                except (asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                    got = len(exc.partial) if isinstance(exc, asyncio.IncompleteReadError) else "?"
                    self._strike(peer, f"truncated stream ({got} of {n} bytes)")
                    break
                group_id, status = await self._admit(body, peer)
                await self._ack(writer, group_id, status)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            pass  # idle or vanished peer: its sender reconnects and retries
        finally:
            self._streams[peer] -= 1
            if self._streams[peer] <= 0:
                del self._streams[peer]
            writer.close()

    async def _refuse_banned(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._ack(writer, "", "banned")
        await _linger(reader)

    async def _admit(self, body: bytes, peer: str) -> tuple[str, str]:
        """Rate limit, decode+verify, dedup, hand over. Returns (group id, status)."""
        bucket = self._buckets.get(peer)
        if bucket is None:
            bucket = self._buckets[peer] = TokenBucket(self.rate, self.burst)
        if not bucket.take():
            self._count("rate_limited", peer, "flood: over the per-peer rate limit")
            return "", "rate_limited"
        return await self.accept_bytes(body, peer)

    async def accept_bytes(self, body: bytes, peer: str) -> tuple[str, str]:
        """Decode and verify one encoded group from `peer` off the event loop, then dedup and hand it over."""
        async with self._decode_slots:
            try:
                group = await asyncio.get_running_loop().run_in_executor(self._decoder, self._decode, body, peer)
            except InvalidRecord as exc:
                self._strike(peer, f"invalid group: {exc}")
                return "", "invalid"
        return await self._hand_over(group, body, peer)

    def _decode(self, body: bytes, peer: str) -> RolloutGroup:
        """Parse, validate and verify (runs in the decode pool); raises InvalidRecord."""
        group = self.decode(body)
        if group.run_id != self.run_id:
            raise InvalidRecord(f"group of run {group.run_id!r}, not {self.run_id!r}")
        if group.sampler_id != peer:
            raise InvalidRecord(f"group signed by {group.sampler_id[-8:]} but sent by {peer[-8:]}")
        return group

    async def _hand_over(self, group: RolloutGroup, body: bytes, peer: str) -> tuple[str, str]:
        if group.group_id in self.seen:
            self._count("duplicate", peer)
            return group.group_id, "duplicate"
        try:
            status = self.on_group(group)
            if status == "ok" and self.durable is not None:
                await self.durable(group, body)  # journaled (and synced) before the ack
        except Exception as exc:  # the consumer's bug must not kill the stream; the sender retries
            logger.exception("rollouts: on_group failed for %s", group.group_id[:12])
            self._count("busy", peer, f"consumer error {type(exc).__name__}")
            return group.group_id, "busy"
        if status == "ok":
            self.seen.add(group.group_id)
            self.accepted += 1
        self._count(status, peer)
        return group.group_id, status

    async def _ack(self, writer: asyncio.StreamWriter, group_id: str, status: str) -> None:
        ack: dict[str, object] = {"id": group_id, "status": status}
        if self.version is not None:
            ack["v"] = int(self.version())
        await write_frame(writer, pack(ack))

    def _count(self, status: str, peer: str, reason: str | None = None) -> None:
        self.statuses[status] += 1
        if reason is not None:
            now = time.monotonic()
            if now - self._last_log.get((peer, status), 0.0) > 1.0:  # one line per peer and reason per second
                self._last_log[(peer, status)] = now
                logger.warning("rollouts: %s from %s (%d so far)", reason, peer[-8:], self.statuses[status])

    def strike(self, peer: str, reason: str) -> None:
        """Count bad data from `peer` found after acceptance (e.g. a group that poisoned a training step; the
        first word of `reason` is its kind): it shows in `recent_offenders` and counts towards a ban."""
        self._strike(peer, reason)

    def _strike(self, peer: str, reason: str) -> None:
        """Count a bad message, log its reason (not throttled: bans bound the volume), maybe ban the peer."""
        kind = "invalid" if reason.startswith("invalid") else reason.split(" ")[0]
        self.rejections[kind] += 1
        self.statuses[kind] += 1
        logger.warning("rollouts: rejected from %s: %s", peer[-8:], reason)
        now = time.monotonic()
        strikes = self._strikes[peer]
        strikes.append(now)
        while strikes and strikes[0] < now - self.ban_seconds:
            strikes.popleft()
        if len(strikes) >= self.strikes_to_ban and not self.is_banned(peer):
            self._banned_until[peer] = now + self.ban_seconds
            strikes.clear()
            logger.warning("rollouts: ignoring %s for %.0f s after %d bad messages", peer[-8:],
                           self.ban_seconds, self.strikes_to_ban)

    # -- the pull path ------------------------------------------------------------------------------------
    async def pull(self, p2p: P2P, peer: PeerID, *, since: float = 0.0, limit: int = 256,
                   timeout: float = 30.0) -> collections.Counter[str]:
        """Fetch up to `limit` recent groups newer than `since` from a sampler's ring; statuses counted."""
        counts: collections.Counter[str] = collections.Counter()
        name = str(peer)
        if self.is_banned(name):
            counts["banned"] += 1
            return counts
        _, reader, writer = await asyncio.wait_for(
            p2p.call_binary_stream_handler(peer, pull_protocol(self.run_id, self.stream)), timeout)
        try:
            await write_frame(writer, pack({"since": float(since), "limit": int(limit)}))
            for _ in range(limit + 1):
                n = await asyncio.wait_for(read_header(reader), timeout)
                if not n:
                    break
                if n > self.max_message_bytes:
                    self._strike(name, f"oversized message ({n} bytes > {self.max_message_bytes})")
                    counts["oversized"] += 1
                    return counts
                body = await asyncio.wait_for(reader.readexactly(n), timeout)
                counts[(await self.accept_bytes(body, name))[1]] += 1
            await write_frame(writer, pack({"op": "bye"}))
        finally:
            writer.close()
        return counts


async def _linger(reader: asyncio.StreamReader, seconds: float = 2.0) -> None:
    """Before closing after a final ack, let the peer hang up first (an immediate close can drop the ack)."""
    deadline = time.monotonic() + seconds
    with contextlib.suppress(asyncio.TimeoutError, ConnectionError, OSError):
        while time.monotonic() < deadline and await asyncio.wait_for(reader.read(1 << 16), deadline - time.monotonic()):
            pass


# --------------------------------------------------------------------------------------------------- sending
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

    def close_stream(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class RolloutSender:
    """Pushes groups to destinations (the run's learners; in broadcast mode every peer that wants rollouts).

    Each destination has a bounded outbox (oldest dropped and counted when full) drained by one task over a
    persistent stream: one group in flight, an ack per group, exponential backoff with jitter on failures
    and on "rate_limited"/"busy". A bounded ring of recent groups is served to learners that pull.

    Self-declared membership is not trusted: a destination counts as alive only while it answers (an ack within
    `alive_window` seconds, or a new link still within its first window). `pending`, the sampler's
    backpressure, counts only live destinations' outboxes, so a peer record with no process behind it (or a
    learner that stopped answering) cannot stall generation; its own outbox stays bounded and it is still tried.
    """

    def __init__(self, p2p: P2P, run_id: str, *, outbox_size: int = 1024, recent_size: int = 1024,
                 ack_timeout: float = 10.0, base_backoff: float = 0.05, max_backoff: float = 5.0,
                 alive_window: float = 30.0, stream: str = "rollouts"):
        self.p2p = p2p
        self.alive_window = alive_window
        self.run_id = run_id
        self.stream = stream
        self.outbox_size = outbox_size
        self.ack_timeout = ack_timeout
        self.base_backoff, self.max_backoff = base_backoff, max_backoff
        self.recent: collections.deque[tuple[float, str, bytes]] = collections.deque(maxlen=recent_size)
        self.delivered = 0
        self.dropped = 0
        self.retries = 0
        self.statuses: collections.Counter[str] = collections.Counter()
        self.latencies: collections.deque[float] = collections.deque(maxlen=10_000)  # enqueue -> ack, seconds
        self.on_delivered: Callable[[str, str, str], None] | None = None  # (peer, group id, status)
        self.newest_hint = -1  # the highest policy version a destination's ack told
        self.hint_peer: str | None = None  # the destination (stream-authenticated peer id) that told it
        self._links: dict[str, _Link] = {}
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
                link = self._links[name] = _Link(peer, self.outbox_size)
                link.task = asyncio.ensure_future(self._drain(link))

    def _send(self, group_id: str, data: bytes, created_at: float) -> None:
        if self._closed:
            self.dropped += 1
            return
        self.recent.append((created_at, group_id, data))
        now = time.monotonic()
        for link in self._links.values():
            if link.retiring:
                continue
            if len(link.outbox) >= link.maxlen:
                link.outbox.popleft()
                self.dropped += 1
                logger.warning("rollouts: outbox to %s full; dropped the oldest group (%d dropped so far)",
                               str(link.peer)[-8:], self.dropped)
            link.outbox.append((group_id, data, now))
            link.wake.set()

    async def _drain(self, link: _Link) -> None:
        failures = 0
        while not self._closed:
            if not link.outbox:
                if link.retiring:
                    break
                link.wake.clear()
                await link.wake.wait()
                continue
            group_id, data, queued_at = link.outbox[0]
            try:
                status = await self._push(link, data)
            except Exception as exc:  # unreachable, reset, timeout, protocol error: reconnect and retry
                link.close_stream()
                status = None
                logger.debug("rollouts: push to %s failed: %s %s", str(link.peer)[-8:], type(exc).__name__, exc)
            if status is None or status in RETRY_STATUSES or status in CLOSING_STATUSES:
                if status in CLOSING_STATUSES:
                    link.close_stream()
                if status == "banned" or status == "oversized":  # retrying cannot help: give up on this group
                    self._finish(link, group_id, queued_at, status)
                    continue
                failures += 1
                self.retries += 1
                delay = min(self.max_backoff, self.base_backoff * 2 ** min(failures - 1, 16))
                await asyncio.sleep(delay * (0.5 + random.random()))
                continue
            failures = 0
            self._finish(link, group_id, queued_at, status)
        link.close_stream()
        if self._links.get(str(link.peer)) is link:
            del self._links[str(link.peer)]

    def _finish(self, link: _Link, group_id: str, queued_at: float, status: str) -> None:
        if link.outbox and link.outbox[0][0] == group_id:
            link.outbox.popleft()
        self.statuses[status] += 1
        if status in ("ok", "duplicate"):
            self.delivered += 1
            self.latencies.append(time.monotonic() - queued_at)
        if self.on_delivered is not None:
            self.on_delivered(str(link.peer), group_id, status)

    async def _push(self, link: _Link, data: bytes) -> str:
        if link.writer is None:
            _, link.reader, link.writer = await asyncio.wait_for(
                self.p2p.call_binary_stream_handler(link.peer, push_protocol(self.run_id, self.stream)),
                self.ack_timeout)
        await write_frame(link.writer, data)
        ack = await asyncio.wait_for(read_control(link.reader), self.ack_timeout)
        if ack is None:
            raise ConnectionError("stream closed before the ack")
        link.last_ack = time.monotonic()
        status = ack.get("status")
        if not isinstance(status, str):
            raise InvalidRecord("ack without a status")
        hint = ack.get("v")
        if isinstance(hint, int) and not isinstance(hint, bool) and self.newest_hint < hint <= MAX_VERSION:
            self.newest_hint, self.hint_peer = hint, str(link.peer)
        return status

    async def _handle_pull(self, info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await asyncio.wait_for(read_control(reader), 10.0)
            if req is None:
                return
            since, limit = req.get("since"), req.get("limit")
            if not isinstance(since, (int, float)) or not isinstance(limit, int) or limit < 0:
                raise InvalidRecord("pull request needs numeric since and int limit")
            items = [data for created, _, data in list(self.recent) if created > since][-min(limit, 65536):]
            for data in items:
                await write_frame(writer, data)
            await write_frame(writer, b"")
            await asyncio.wait_for(read_control(reader), 30.0)  # the puller's "bye": now closing is safe
        except InvalidRecord as exc:
            logger.warning("rollouts: bad pull request from %s: %s", str(info.peer_id)[-8:], exc)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()
