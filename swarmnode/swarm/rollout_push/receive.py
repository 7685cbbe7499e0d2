"""The receiving end of rollout pushes: validation off the event loop, dedup, per-peer rate limits, bans."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from hivemind.p2p import P2P, PeerID

from swarmnode.diskspace import is_disk_full
from swarmnode.protocol.codec import InvalidRecord, pack
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits
from swarmnode.protocol.run_settings import SETTINGS_STATUS
from swarmnode.swarm.frames import read_header, write_frame, write_frames
from swarmnode.swarm.hivemind_compat import has_buffered_bytes
from swarmnode.swarm.rollout_push.peer_guard import PeerBans, TokenBucket
from swarmnode.swarm.rollout_push.seen import SeenIds
from swarmnode.swarm.rollout_push.streams import FULL, pull_protocol, push_protocol
from swarmnode.swarm.rollout_push.streams import linger as _linger

logger = logging.getLogger(__name__)

SEEN_CAPACITY = 200_000  # group ids remembered (and journaled) for exactly-once delivery
MAX_GROUPS_PER_READ = 64  # groups already buffered on one stream admitted together (one journal sync, one write)
INLINE_DECODE_BYTES = 4096  # messages up to this size are decoded on the event loop (see RolloutReceiver)


class RolloutReceiver:
    """Accepts rollout groups from peers: size limit, rate limit, decode+verify, dedup, hand over, ack.

    `on_group(group) -> status` is the learner's buffer.add; "ok" means accepted (the id is then
    remembered and journaled). With `durable`, the "ok" groups' (group, bytes) pairs are awaited into it (the
    learner's group journal; one call for the groups read together from one stream, so one sync covers them)
    before the ack, so an acknowledged group survives a crash. Peers that send garbage (undecodable,
    bad signature, oversized, truncated) collect strikes; `strikes_to_ban` strikes within `ban_seconds` get the
    peer ignored for `ban_seconds`; a ban acts on stream open and before any body is read.

    Denial of service: a message over `inline_decode_bytes` is decoded and verified in a small thread pool
    (`decode_workers`, off the event loop, so heartbeats and acks go on); a smaller one (a typical group: under
    1 KB for the tiny model, ~0.1 ms to decode and verify, 65 us of it the signature) is decoded on the loop,
    which saves two thread hops per group (0.13 ms CPU on one core) and bounds the loop's pause per message. Element
    counts are bounded while decoding either way (see
    `RolloutLimits`); one peer may hold at most `max_streams_per_peer` push streams at once (more are answered
    "busy" and closed before anything is read), so one identity cannot queue unbounded work.

    Flow control: while `full()` says the consumer holds enough groups, a push is answered "full" before it is
    decoded (no CPU spent on a group that would wait or be refused); the sender keeps it and resends after a
    short wait. With `credit`, every ack also tells the sender how many more groups the consumer invites from
    it (`credit.CreditPolicy`), and its sampler generates no more than that (instead of making groups nobody
    takes in time: without credits, a fast sampler's surplus aged past the staleness bound and was dropped).
    With `turn`, a push whose sender's turn it is not (more senders than room: `CreditPolicy.in_turn`) is
    answered "full" too, so the room goes round the senders instead of to whoever resends first; with
    `turn_wait`, a "full" ack also tells the sender how long to wait before it pushes again (`"w"`, seconds).
    With `settle`, every group that passed the door is settled once its verdict is known (`settle(sender,
    status)`; "ok" once durable): True means the refusal counts against the sender, which is struck
    (`CreditPolicy.settle`, `credit.counts_against`); `on_ban(sender)` is told each ban.

    `stream` and `decode` carry another record over the same machinery (SAPO's text groups: stream
    "text-rollouts"); a decoded record has `group_id`, `run_id` and its signer `sampler_id`.
    """

    def __init__(
        self,
        run_id: str,
        on_group: Callable[[RolloutGroup], str],
        limits: RolloutLimits,
        *,
        rate: float = 50.0,
        burst: float = 100.0,
        strikes_to_ban: int = 3,
        ban_seconds: float = 60.0,
        seen_capacity: int = SEEN_CAPACITY,
        journal: str | Path | None = None,
        idle_timeout: float = 300.0,
        read_timeout: float = 30.0,
        version: Callable[[], int] | None = None,
        durable: Callable[[list[tuple[Any, bytes]]], Awaitable[None]] | None = None,
        max_streams_per_peer: int = 4,
        decode_workers: int = 2,
        stream: str = "rollouts",
        decode: Callable[[bytes], Any] | None = None,
        inline_decode_bytes: int = INLINE_DECODE_BYTES,
        full: Callable[[], bool] | None = None,
        credit: Callable[[str], int] | None = None,
        settings: dict[str, Any] | None = None,
        turn: Callable[[str], bool] | None = None,
        turn_wait: Callable[[str], float] | None = None,
        settle: Callable[[str, str], bool] | None = None,
        on_ban: Callable[[str], None] | None = None,
    ):
        self.run_id = run_id
        self.stream = stream
        self.decode = decode or (lambda body: RolloutGroup.decode(body, limits))
        self.on_group = on_group
        self.settings = settings  # the run's values a "settings" ack carries (`swarmnode.protocol.run_settings`)
        self.durable = durable
        self.full = full  # True while the consumer wants no more groups for now (see the class docstring)
        self.credit = credit  # (sender) -> groups the consumer invites from it now, told in its acks
        self.saturated: Callable[[str], dict[str, str]] | None = None  # (sender) -> prompts to tell it
        self.turn = turn  # (sender) -> whether its push may pass now (False: "full"; `credit.CreditPolicy.in_turn`)
        self.turn_wait = turn_wait  # (sender) -> seconds a "full" ack tells it to wait (`CreditPolicy.turn_wait`)
        self.settle = settle  # (sender, status) of a group past the door -> whether it counts against the sender
        self.version = version  # the learner's current policy version, told in every ack
        self.limits = limits
        self.max_message_bytes = limits.max_bytes
        self.rate, self.burst = rate, burst
        self.bans = PeerBans(strikes_to_ban, ban_seconds, on_ban)
        self.idle_timeout, self.read_timeout = idle_timeout, read_timeout
        self.max_streams_per_peer = max_streams_per_peer
        self.inline_decode_bytes = inline_decode_bytes
        self.seen = SeenIds(seen_capacity, journal)
        self.accepted = 0
        self.statuses: collections.Counter[str] = collections.Counter()
        self.rejections: collections.Counter[str] = collections.Counter()  # reason -> count (garbage only)
        self._buckets: dict[str, TokenBucket] = {}
        self._last_log: dict[tuple[str, str], float] = {}
        self._streams: collections.Counter[str] = collections.Counter()  # open push streams per peer
        self._closed = False
        self._decoder = concurrent.futures.ThreadPoolExecutor(decode_workers, thread_name_prefix="rollout-decode")
        self._decode_slots = asyncio.Semaphore(decode_workers)

    async def start(self, p2p: P2P) -> None:
        """Register the push handler on `p2p`."""
        await p2p.add_binary_stream_handler(push_protocol(self.run_id, self.stream), self._handle_push)

    def close(self) -> None:
        self._closed = True
        self.seen.close()
        self._decoder.shutdown(wait=False, cancel_futures=True)

    def is_banned(self, peer: str) -> bool:
        """Whether `peer` is ignored now (`PeerBans`)."""
        return self.bans.is_banned(peer)

    def recent_offenders(self) -> list[str]:
        """Peers that sent invalid data within the last `ban_seconds` (banned or not), most recent first."""
        return self.bans.recent_offenders()

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
                bodies: list[bytes] = []
                verdict: str | None = None
                # the groups a sender wrote back to back (already here) are admitted together: one journal
                # sync and one write of their acks for all of them
                while (
                    verdict is None and len(bodies) < MAX_GROUPS_PER_READ and (not bodies or has_buffered_bytes(reader))
                ):
                    body, verdict = await self._read_body(reader, writer, peer, wait=not bodies)
                    if body is not None:
                        bodies.append(body)
                if bodies:
                    await self._ack_all(writer, await self._admit_all(bodies, peer), peer)
                if verdict is not None:
                    await self._refuse(reader, writer, verdict)
                    break
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            pass  # idle or vanished peer: its sender reconnects and retries
        finally:
            self._streams[peer] -= 1
            if self._streams[peer] <= 0:
                del self._streams[peer]
            writer.close()

    async def _read_body(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str, wait: bool
    ) -> tuple[bytes | None, str | None]:
        """The next message's body, or why the stream ends: ("end" clean close, "banned", "oversized",
        "truncated"). Waits up to `idle_timeout` for the next header only when `wait`."""
        if self.is_banned(peer):
            return None, "banned"
        n = await asyncio.wait_for(read_header(reader), self.idle_timeout if wait else self.read_timeout)
        if n is None:
            return None, "end"
        if self.is_banned(peer):  # banned while this stream waited: the body is never read
            return None, "banned"
        if n > self.max_message_bytes:
            self._strike(peer, f"oversized message ({n} bytes > {self.max_message_bytes})")
            return None, "oversized"
        try:
            return await asyncio.wait_for(reader.readexactly(n), self.read_timeout), None
        except (TimeoutError, asyncio.IncompleteReadError) as exc:
            got = len(exc.partial) if isinstance(exc, asyncio.IncompleteReadError) else "?"
            self._strike(peer, f"truncated stream ({got} of {n} bytes)")
            return None, "truncated"

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, verdict: str) -> None:
        """End a push stream: a banned or oversized sender gets its ack, then we let it hang up first."""
        if verdict == "banned":
            await self._refuse_banned(reader, writer)
        elif verdict == "oversized":
            await self._ack(writer, "", "oversized")
            await _linger(reader)

    async def _refuse_banned(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._ack(writer, "", "banned")
        await _linger(reader)

    def _gate(self, peer: str) -> str | None:
        """Why a push from `peer` is refused before decoding (rate limit, a full consumer), or None."""
        bucket = self._buckets.get(peer)
        if bucket is None:
            bucket = self._buckets[peer] = TokenBucket(self.rate, self.burst)
        if not bucket.take():
            self._count("rate_limited", peer, "flood: over the per-peer rate limit")
            return "rate_limited"
        if (self.full is not None and self.full()) or (self.turn is not None and not self.turn(peer)):
            self._count(FULL, peer)
            return FULL
        return None

    async def _admit_all(self, bodies: list[bytes], peer: str) -> list[tuple[str, str]]:
        """Rate limit, decode+verify, dedup and hand over each of one sender's `bodies`; (group id, status) per
        body, in order."""
        return await self._accept(bodies, peer, gated=True)

    async def accept_bytes(self, body: bytes, peer: str) -> tuple[str, str]:
        """Decode and verify one encoded group from `peer` (a large one off the event loop), then dedup and hand
        it over."""
        return (await self._accept([body], peer, gated=False))[0]

    async def _accept(self, bodies: list[bytes], peer: str, gated: bool) -> list[tuple[str, str]]:
        """The groups the consumer takes are made durable together (one journal sync for all of them, not one
        per group) before any is acknowledged; small ones are decoded in turn without a task each."""
        results: list[tuple[str, str]] = []
        taken: list[tuple[int, Any, bytes]] = []  # (index in results, group, body) the consumer took
        batch: set[str] = set()  # ids taken in this batch (one sender may repeat a group before its ack)
        async for body, group in self._decoded_in_turn(bodies, peer, gated):
            if isinstance(group, tuple):  # refused at the door or while decoding
                results.append(group)
                if gated and group[1] not in (FULL, "rate_limited"):
                    self._settled(peer, group[1])
                continue
            status = self._offer(group, batch)
            results.append((group.group_id, status))
            if status == "ok":
                taken.append((len(results) - 1, group, body))
                batch.add(group.group_id)
            else:
                self._count(status, peer)
                if gated:
                    self._settled(peer, status, group.group_id)
        if taken:
            await self._keep(taken, results, peer)
        return results

    async def _decoded_in_turn(self, bodies: list[bytes], peer: str, gated: bool) -> AsyncIterator[tuple[bytes, Any]]:
        """(body, group or (id, status) when refused) for each body, in order. Small bodies are gated and decoded
        one at a time as the caller takes them (so `full` sees the groups handed over before); large ones are
        gated first, then decoded in the pool concurrently."""
        if all(len(body) <= self.inline_decode_bytes for body in bodies):
            for body in bodies:
                why = self._gate(peer) if gated else None
                yield body, (("", why) if why is not None else await self._decoded(body, peer))
            return
        refused = [self._gate(peer) if gated else None for _ in bodies]
        decoded = iter(
            await asyncio.gather(*(self._decoded(body, peer) for body, why in zip(bodies, refused) if why is None))
        )
        for body, why in zip(bodies, refused):
            yield body, (("", why) if why is not None else next(decoded))

    async def _decoded(self, body: bytes, peer: str) -> Any:
        """The decoded, verified group, or (id, status) when it is refused."""
        try:
            if len(body) <= self.inline_decode_bytes:
                group = self._decode(body, peer)
            else:
                async with self._decode_slots:
                    group = await asyncio.get_running_loop().run_in_executor(self._decoder, self._decode, body, peer)
        except InvalidRecord as exc:
            self._strike(peer, f"invalid group: {exc}")
            return "", "invalid"
        except (RuntimeError, concurrent.futures.CancelledError):
            if not self._closed:
                raise
            self._count("busy", peer)  # the pool was shut down: the learner is stopping; the sender retries
            return "", "busy"
        if self._closed:
            self._count("busy", peer)  # decoded after the receiver closed: the learner is stopping
            return "", "busy"
        return group

    def _decode(self, body: bytes, peer: str) -> RolloutGroup:
        """Parse, validate and verify (runs in the decode pool); raises InvalidRecord."""
        group = self.decode(body)
        if group.run_id != self.run_id:
            raise InvalidRecord(f"group of run {group.run_id!r}, not {self.run_id!r}")
        if group.sampler_id != peer:
            raise InvalidRecord(f"group signed by {group.sampler_id[-8:]} but sent by {peer[-8:]}")
        return group

    def _offer(self, group: Any, batch: set[str]) -> str:
        """Dedup, then hand `group` to the consumer; its status (not yet counted)."""
        if group.group_id in self.seen or group.group_id in batch:
            return "duplicate"
        try:
            return self.on_group(group)
        except Exception:  # the consumer's bug must not kill the stream; the sender retries
            logger.exception("rollouts: on_group failed for %s", group.group_id[:12])
            return "busy"

    async def _keep(self, taken: list[tuple[int, Any, bytes]], results: list[tuple[str, str]], peer: str) -> None:
        """Make the groups the consumer took durable (before their acks), then remember them as accepted."""
        if self.durable is not None:
            try:
                await self.durable([(group, body) for _, group, body in taken])  # journaled and synced
            except Exception as exc:  # the sender retries: the groups are answered "busy"
                if is_disk_full(exc):  # one line (repeats are folded), no traceback
                    logger.warning("rollouts: groups answered busy: %s", exc)
                else:
                    logger.exception("rollouts: journaling %d groups failed", len(taken))
                for i, group, _ in taken:
                    results[i] = (group.group_id, "busy")
                    self._count("busy", peer, f"consumer error {type(exc).__name__}")
                    self._settled(peer, "busy")
                return
        self.seen.add_many([group.group_id for _, group, _ in taken])
        self.accepted += len(taken)
        for _ in taken:
            self._count("ok", peer)
            self._settled(peer, "ok")

    def _settled(self, peer: str, status: str, group_id: str = "") -> None:
        """A group of `peer` that passed the door has its verdict: told to `settle`; a refusal that counts
        against `peer` is a strike (the refusal itself is already counted under its status)."""
        if self.settle is not None and self.settle(peer, status) and status != "invalid":  # invalid: struck already
            self._strike(peer, f"{status} group {group_id[:12]} refused after the door", tally=False)

    async def _ack(self, writer: asyncio.StreamWriter, group_id: str, status: str) -> None:
        await self._ack_all(writer, [(group_id, status)])

    async def _ack_all(
        self, writer: asyncio.StreamWriter, results: list[tuple[str, str]], peer: str | None = None
    ) -> None:
        """One ack frame per (group id, status), in order, in one write; each tells the learner's version and
        (to a `peer` that pushed, with `credit`) the groups it invites from that peer after these."""
        told: dict[str, int] = {}
        told_full: dict[str, float] = {}
        if self.version is not None:
            told["v"] = int(self.version())
        if self.credit is not None and peer is not None:
            told["c"] = int(self.credit(peer))
        if self.turn_wait is not None and peer is not None and any(status == FULL for _, status in results):
            if wait := self.turn_wait(peer):
                told_full = {"w": round(wait, 2)}
        acks = [
            {
                "id": group_id,
                "status": status,
                **told,
                **(told_full if status == FULL else {}),
                **({"run": self.settings} if status == SETTINGS_STATUS and self.settings else {}),
            }
            for group_id, status in results
        ]
        if self.saturated is not None and peer is not None and acks and (news := self.saturated(peer)):
            acks[-1]["s"] = news  # prompts the learner found all-solved / all-failed, not yet told to this peer
        await write_frames(writer, [pack(ack) for ack in acks])

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

    def _strike(self, peer: str, reason: str, tally: bool = True) -> None:
        """Count a bad message (`tally`: under its kind, the first word of `reason`), log its reason (not
        throttled: bans bound the volume), maybe ban the peer."""
        kind = "invalid" if reason.startswith("invalid") else reason.split(" ")[0]
        if tally:
            self.rejections[kind] += 1
            self.statuses[kind] += 1
        logger.warning("rollouts: rejected from %s: %s", peer[-8:], reason)
        if self.bans.strike(peer):
            logger.warning(
                "rollouts: ignoring %s for %.0f s after %d bad messages",
                peer[-8:],
                self.bans.ban_seconds,
                self.bans.strikes_to_ban,
            )

    # -- the pull path ------------------------------------------------------------------------------------
    async def pull(
        self, p2p: P2P, peer: PeerID, *, since: float = 0.0, limit: int = 256, timeout: float = 30.0
    ) -> collections.Counter[str]:
        """Fetch up to `limit` recent groups newer than `since` from a sampler's ring; statuses counted."""
        counts: collections.Counter[str] = collections.Counter()
        name = str(peer)
        if self.is_banned(name):
            counts["banned"] += 1
            return counts
        _, reader, writer = await asyncio.wait_for(
            p2p.call_binary_stream_handler(peer, pull_protocol(self.run_id, self.stream)), timeout
        )
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
