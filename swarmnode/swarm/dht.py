"""The run's DHT: an in-process hivemind `DHTNode` on the caller's asyncio loop, sharing the node's P2P.

Keys (namespaced by run id; every subkey owned and signed, see `swarmnode.swarm.validator`):
- `<run>/peers/<shard>` subkey `<peer id>`        -> PeerRecord, expiring after `missed_beats_to_expire` beats; the
                                                   shard is a prefix of the peer id's hash (`swarm.peer_keys`)
- `<run>/learners`  subkey `<peer id>`            -> a learner's PeerRecord again: the run's index of learners
- `<run>/learner/<peer id>` subkey `<peer id>`   -> that learner's PeerRecord (its own key: no flood hides it)
- `<run>/versions`  subkey `newest@<peer id>`    -> VersionAnnouncement of that learner's newest version
- `<run>/card`      subkey `card@<peer id>`      -> a RunCard (signed by the run's owner, stored by anyone)
What this node stores for others is bounded per key (`swarmnode.swarm.dht_storage.CappedStorage`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from hivemind.dht.node import DHTNode
from hivemind.p2p import P2P
from hivemind.utils import get_dht_time

from swarmnode.config import NetworkConfig, NodeConfig
from swarmnode.identity import Identity
from swarmnode.protocol.announce import VersionAnnouncement
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.peer import PeerRecord
from swarmnode.protocol.reachability import CLIENT_ONLY, RELAYED
from swarmnode.protocol.run_card import RunCard
from swarmnode.swarm.bootstrap_watch import BootstrapWatch
from swarmnode.swarm.dht_storage import CappedStorage
from swarmnode.swarm.hivemind_compat import ping_into_routing_table, use_local_storage
from swarmnode.swarm.p2p import (
    STOP_REQUESTED,
    dial_peer,
    p2pd_alive,
    parse_initial_peer,
    start_p2p,
    stop_p2p,
    while_p2pd_alive,
)
from swarmnode.swarm.peer_keys import learners_key, peer_shard, peer_shard_key
from swarmnode.swarm.reachability import DialbackService, Reachability, start_checked_p2p
from swarmnode.swarm.relay import start_relay_p2p
from swarmnode.swarm.validator import (
    ANNOUNCEMENT_LABEL,
    CARD_LABEL,
    DEFAULT_MAX_TTL_S,
    SwarmValidator,
    learner_key,
    owned_subkey,
    run_keys,
)

logger = logging.getLogger(__name__)

CARD_TTL_S = 120.0  # a stored run card lives this long unless stored again
STORE_REPLICAS = 5  # DHT nodes nearest a key that each store asks to keep it (hivemind's default)
VERSION_TTL_MIN_S = 10.0  # announcements live max(this, heartbeat x missed beats) unless re-announced


def max_record_ttl(net: NetworkConfig) -> float:
    """The longest lifetime this node accepts on anyone's record: 4x its own record TTL, at least 5 minutes."""
    return max(DEFAULT_MAX_TTL_S, 4 * net.heartbeat_interval * net.missed_beats_to_expire)


class SwarmDHT:
    """One node's view of the run's DHT. Create with `await SwarmDHT.create(...)`; `await shutdown()` at the end."""

    def __init__(
        self, cfg: NodeConfig, identity: Identity, p2p: P2P, node: DHTNode, validator: SwarmValidator, owns_p2p: bool
    ):
        self.cfg, self.identity, self.p2p, self.node = cfg, identity, p2p, node
        self.validator = validator
        self._owns_p2p = owns_p2p
        self._keys = run_keys(cfg.run_id, cfg.network.peer_shards)
        self.shards = cfg.network.peer_shards
        self._last_announcement: tuple[int, dict] | None = None
        self._redial: asyncio.Task | None = None
        self.bootstrap_watch = BootstrapWatch()  # says when none of the initial peers answers any more
        self.reachability: Reachability | None = None  # decided at join (None: not checked, e.g. a client)
        self.dialback: DialbackService | None = None  # answering others' reachability checks

    @classmethod
    async def create(
        cls,
        cfg: NodeConfig,
        identity: Identity,
        p2p: P2P | None = None,
        *,
        client_mode: bool = False,
        check_reachability: bool = False,
        relay_service: bool = False,
    ) -> SwarmDHT:
        """Join the run's DHT through the initial peers the P2P host reached (starts a host if `p2p` is None).

        `check_reachability`: decide first whether others can dial this node (`swarmnode.swarm.reachability`);
        one that cannot joins as a DHT client. `relay_service`: relay for such nodes (bootstraps). A node that
        serves the DHT answers others' reachability checks."""
        client_mode = client_mode or cfg.network.client_mode
        owns_p2p = p2p is None
        reach = None
        if p2p is None and check_reachability and not client_mode:
            p2p, reach = await start_checked_p2p(cfg.network, identity, relay_service=relay_service)
            client_mode = reach.status in (RELAYED, CLIENT_ONLY)
        elif p2p is None and relay_service and cfg.network.use_relay and not client_mode:
            p2p = await start_relay_p2p(cfg.network, identity)
        elif p2p is None:
            p2p = await start_p2p(cfg.network, identity, client_mode=client_mode, relay_service=relay_service)
        dialback = None
        try:
            connected = {str(info.peer_id) for info in await p2p.list_peers()}
            initial = [t for t in cfg.network.initial_peers if str(parse_initial_peer(t).peer_id) in connected]
            validator = SwarmValidator(
                cfg.run_id, identity, max_ttl=max_record_ttl(cfg.network), shards=cfg.network.peer_shards
            )
            node = await DHTNode.create(
                p2p=p2p,
                initial_peers=initial,
                client_mode=client_mode,
                record_validator=validator,
                ensure_bootstrap_success=False,
                bucket_size=cfg.network.dht_bucket_size,  # also a lookup's beam and a reply's list of nearest peers
                num_replicas=STORE_REPLICAS,
                cache_locally=False,  # a cached copy would outlive withdrawn ("leaving") records
                cache_nearest=0,
            )
            use_local_storage(node, CappedStorage())  # a flood of throwaway keys cannot crowd a key's readers out
            if not client_mode and owns_p2p:
                dialback = await DialbackService(p2p, relay=relay_service and cfg.network.use_relay).start()
        except BaseException:
            if dialback is not None:
                await dialback.close()
            if owns_p2p:
                await stop_p2p(p2p)
            raise
        dht = cls(cfg, identity, p2p, node, validator, owns_p2p)
        dht.reachability, dht.dialback = reach, dialback
        return dht

    @property
    def record_ttl(self) -> float:
        """Seconds a peer record stays visible without a heartbeat."""
        net = self.cfg.network
        return net.heartbeat_interval * net.missed_beats_to_expire

    async def store_peer(self, record: PeerRecord) -> bool:
        """Store this node's record (must be our own) under its shard; True if at least one DHT peer (or we) kept
        it. Initial peers we lost are re-dialled first (see `reconnect_initial_peers`): the heartbeat brings them
        back."""
        if record.peer_id != self.identity.peer_id:
            raise ValueError("a node can only publish its own peer record")
        if self._redial is None or self._redial.done():  # in the background: a dead address may take seconds
            self._redial = asyncio.create_task(self._reconnect_quietly())
        return bool(
            await self.node.store(
                self.shard_key(peer_shard(record.peer_id, self.shards)),
                record.encode(),
                get_dht_time() + self.record_ttl,
                subkey=record.peer_id,
            )
        )

    def shard_key(self, shard: int, run_id: str | None = None) -> str:
        """The DHT key of shard `shard` of the peer records of this run (or of `run_id`)."""
        return peer_shard_key(run_id or self.cfg.run_id, shard)

    async def store_learner(self, record: PeerRecord) -> bool:
        """Store this learner's record under its own key (`validator.learner_key`), where no flood reaches, and in
        the run's index of learners (`peer_keys.learners_key`); True if either was kept."""
        if record.peer_id != self.identity.peer_id or record.role != "learner":
            raise ValueError("a node can only publish its own learner record")
        keys = [learner_key(self.cfg.run_id, record.peer_id), learners_key(self.cfg.run_id)]
        stored = await self.node.store_many(
            keys, [record.encode()] * 2, get_dht_time() + self.record_ttl, subkeys=[record.peer_id] * 2
        )
        return any(stored.values())

    async def designated_learners(self, peer_ids: list[str]) -> list[PeerRecord]:
        """The live records of the learners `peer_ids` (`trust.learner_keys`), each read from its own key: one
        small read per learner, whatever the run's peers key holds."""

        async def one(peer_id: str) -> PeerRecord | None:
            payload = (await self._subkeys(learner_key(self.cfg.run_id, peer_id))).get(peer_id)
            try:
                record = PeerRecord.decode(payload) if payload is not None else None
            except InvalidRecord:
                return None
            return record if record is not None and record.peer_id == peer_id and record.state == "up" else None

        found = await asyncio.gather(*(one(p) for p in peer_ids))
        return [r for r in found if r is not None]

    async def reconnect_initial_peers(self, timeout: float = 5.0) -> int:
        """Re-dial the initial peers this node is no longer connected to and put each one that answers back in
        the DHT routing table (a bootstrap restarted with the same key and address is otherwise never asked
        again once its entry was dropped); how many came back."""
        wanted = [parse_initial_peer(text) for text in self.cfg.network.initial_peers]
        if not wanted:
            return 0
        connected = {str(info.peer_id) for info in await self.p2p.list_peers()}
        back = answering = 0
        for peer in wanted:
            if str(peer.peer_id) == self.identity.peer_id:
                continue
            if str(peer.peer_id) in connected:
                answering += 1
                continue
            if await dial_peer(self.p2p, peer, timeout) is None and await ping_into_routing_table(
                self.node, peer.peer_id
            ):
                logger.info("initial peer %s is back", peer.text)
                back += 1
        others = {str(p.peer_id) for p in wanted} - {self.identity.peer_id}
        if news := self.bootstrap_watch.seen(answering + back, len(others)):
            logger.warning(news)
        return back

    async def _reconnect_quietly(self) -> None:
        try:
            await self.reconnect_initial_peers()
        except Exception as exc:  # a daemon hiccup must not end the heartbeat (nor, stopping, be news)
            (logger.debug if STOP_REQUESTED.is_set() else logger.info)("re-dialling initial peers failed: %s", exc)

    async def _subkeys(self, key: str) -> dict[str, bytes]:
        return (await self._subkeys_many([key]))[key]

    async def _subkeys_many(self, keys: list[str]) -> dict[str, dict[str, bytes]]:
        """The subkeys of each of `keys`, in one batched DHT read (hivemind's `get_many`: one beam search for all)."""
        found = await self.node.get_many(keys, sufficient_expiration_time=float("inf")) if keys else {}
        out: dict[str, dict[str, bytes]] = {}
        for key in keys:
            item = found.get(key)
            value = item.value if item is not None else None
            out[key] = (
                {sub: v.value for sub, v in value.items() if isinstance(v.value, bytes)}
                if isinstance(value, dict)
                else {}
            )
        return out

    def _decoded(self, subkeys: dict[str, bytes]) -> list[PeerRecord]:
        records = []
        for subkey, payload in subkeys.items():
            try:  # validated on receipt, when the validator decoded it (else, e.g. our own store, decoded here)
                record = self.validator.peer_record(payload) or PeerRecord.decode(payload)
            except InvalidRecord:
                continue
            if record.peer_id == subkey:
                records.append(record)
        return records

    async def read_shards(self, shards: list[int], run_id: str | None = None) -> dict[int, list[PeerRecord]]:
        """The unexpired peer records (leaving ones too) of each of `shards`, in one batched read (of another run:
        `run_id`, read only)."""
        if run_id is not None and run_id != self.cfg.run_id:
            self.validator.also_read_peers_of(run_id)
        keys = {s: self.shard_key(s, run_id) for s in shards}
        found = await self._subkeys_many(list(keys.values()))
        return {s: self._decoded(found[key]) for s, key in keys.items()}

    async def all_peers(self, run_id: str | None = None) -> list[PeerRecord]:
        """Every unexpired peer record, including those marked leaving, from every shard (of another run:
        `run_id`, read only). It reads the whole run: nodes read `sample_shards`, `learners` or `own_record`."""
        by_shard = await self.read_shards(list(range(self.shards)), run_id)
        return sorted((r for records in by_shard.values() for r in records), key=lambda r: (r.role, r.peer_id))

    async def live_peers(self, role: str | None = None, run_id: str | None = None) -> list[PeerRecord]:
        """Peers with a live record (not expired, not leaving), optionally of one role (or of another run). The
        learners of this run are read from their index alone (a small read); any other choice reads every shard."""
        if role == "learner" and run_id is None:
            return await self.learners()
        return [r for r in await self.all_peers(run_id) if r.state == "up" and (role is None or r.role == role)]

    async def learners(self, leaving: bool = False) -> list[PeerRecord]:
        """The live records in the run's index of learners (`peer_keys.learners_key`), whoever they are (with
        `leaving`, those marked leaving too)."""
        records = self._decoded(await self._subkeys(learners_key(self.cfg.run_id)))
        return sorted(
            (r for r in records if (leaving or r.state == "up") and r.role == "learner"), key=lambda r: r.peer_id
        )

    async def own_record(self) -> PeerRecord | None:
        """This node's record as the DHT holds it now (a read of its own shard alone), or None."""
        me = self.identity.peer_id
        found = await self.read_shards([peer_shard(me, self.shards)])
        return next((r for records in found.values() for r in records if r.peer_id == me), None)

    async def sample_shards(
        self, limit: int, batch: int = 4, rng: random.Random | None = None, run_id: str | None = None
    ) -> dict[int, list[PeerRecord]]:
        """Live peer records (not leaving) of whole shards read in random order, `batch` shards per batched read,
        until at least `limit` records or every shard is read: shard -> its records. A bounded part of the run
        whatever its size (about `limit` + one read's worth of records; every record while the run is small)."""
        order = list(range(self.shards))
        (rng or random).shuffle(order)
        found: dict[int, list[PeerRecord]] = {}
        records = 0
        while len(found) < len(order) and records < limit:
            more = await self.read_shards(order[len(found) : len(found) + batch], run_id)
            for shard, shard_records in more.items():
                found[shard] = [r for r in shard_records if r.state == "up"]
                records += len(found[shard])
        return found

    async def announce_version(self, version: int, pointer: dict[str, Any]) -> bool:
        """Announce that this learner published `version` (re-announced by `refresh_announcement`)."""
        announcement = VersionAnnouncement(self.identity.peer_id, int(version), dict(pointer), time.time())
        payload = announcement.encode()
        VersionAnnouncement.decode(payload)  # fail at the source, not at every receiver
        self._last_announcement = (int(version), dict(pointer))
        return bool(
            await self.node.store(
                self._keys["versions"],
                payload,
                get_dht_time() + self.announcement_ttl,
                subkey=owned_subkey(self.identity.peer_id, ANNOUNCEMENT_LABEL),  # each announcement replaces the last
            )
        )

    @property
    def announcement_ttl(self) -> float:
        """Seconds an announcement lives: like a peer record, it expires after missed heartbeats (the learner
        re-announces on every heartbeat). One subkey per learner: with a subkey per version, a learner publishing
        every step left ttl x versions/s signed subkeys that every DHT read and every announcement's store had to
        verify (in the demo, ~35 % of the learner's event loop went to those signature checks)."""
        net = self.cfg.network
        return max(VERSION_TTL_MIN_S, net.heartbeat_interval * net.missed_beats_to_expire)

    async def refresh_announcement(self) -> None:
        """Re-store the newest announcement so it does not expire while the learner lives."""
        if self._last_announcement is not None:
            await self.announce_version(*self._last_announcement)

    async def announcements(self) -> list[VersionAnnouncement]:
        """Unexpired announcements from accepted learners (`trust.learner_keys`, or any if that is empty)."""
        allowed = set(self.cfg.trust.learner_keys)
        out = []
        for payload in (await self._subkeys(self._keys["versions"])).values():
            try:
                announcement = VersionAnnouncement.decode(payload)
            except InvalidRecord:
                continue
            if not allowed or announcement.peer_id in allowed:
                out.append(announcement)
        return out

    async def newest_version(self) -> tuple[int, dict] | None:
        """(version, pointer) of the newest announced version, or None if nothing is announced."""
        found = await self.announcements()
        if not found:
            return None
        newest = max(found, key=lambda a: (a.version, a.timestamp))
        return newest.version, newest.pointer

    async def store_card(self, card: RunCard) -> bool:
        """Store the run's card (signed by its owner) under this node's subkey of `<run>/card`, for `CARD_TTL_S`
        seconds: whoever serves the card re-stores it on its heartbeat."""
        return bool(
            await self.node.store(
                self._keys["card"],
                card.encode(),
                get_dht_time() + min(CARD_TTL_S, max_record_ttl(self.cfg.network) - 1),
                subkey=owned_subkey(self.identity.peer_id, CARD_LABEL),
            )
        )

    async def cards(self) -> list[RunCard]:
        """Every valid run card stored for this run (whoever signed it: the reader picks the owner's)."""
        out = []
        for payload in (await self._subkeys(self._keys["card"])).values():
            try:
                out.append(RunCard.decode(payload))
            except InvalidRecord:
                continue
        return out

    async def shutdown(self) -> None:
        """Leave the DHT; stop the P2P host too if this object started it."""
        if self._redial is not None:
            self._redial.cancel()
        try:
            if p2pd_alive(self.p2p):  # a dead daemon answers nothing: leaving politely would only time out
                await while_p2pd_alive(self.p2p, self.node.shutdown(), timeout=10)
        except (TimeoutError, Exception) as exc:  # a broken daemon must not block leaving
            if p2pd_alive(self.p2p):  # a daemon that exited first (Ctrl-C reaches it too) is no news
                logger.warning("DHT node did not shut down cleanly: %r", exc)
        finally:
            if self.dialback is not None:
                await self.dialback.close()
            if self._owns_p2p:
                await stop_p2p(self.p2p)
