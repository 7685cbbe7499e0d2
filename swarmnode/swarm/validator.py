"""Owner-only, schema-checked DHT records for one run (an Ed25519 hivemind RecordValidator).

Every record under the run's keys must
- use a subkey naming its owner: `<peer id>` or `<label>@<peer id>` (an Ed25519 peer id embeds its public key,
  so no separate owner marker is needed),
- carry a 64-byte signature by that owner over (key, subkey, value, expiration time) — so a record cannot be
  moved to another key, subkey or lifetime,
- fit in `MAX_RECORD_BYTES` and decode with the schema registered for its key,
- expire within `max_ttl` seconds from now (the writer picks the expiration time: without a cap, one record
  with no process behind it would stay a "live" peer or a send target for as long as its writer wished).
Records under any other key are refused: strangers cannot use the run's DHT as free storage. The learners'
hivemind averager (`swarmnode.swarm.averaging`) writes its two keys (`averaging_keys`) in the same owned, signed
form, with a bool or number as payload.
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable

import msgpack
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord, RecordValidatorBase
from hivemind.utils import get_dht_time

from swarmnode.board.record import BoardRecord, CurveRecord
from swarmnode.identity import SIGNATURE_BYTES, Identity, verify
from swarmnode.protocol.announce import VersionAnnouncement
from swarmnode.protocol.codec import InvalidRecord, pack
from swarmnode.protocol.peer import PeerRecord
from swarmnode.protocol.run_card import RunCard
from swarmnode.swarm.peer_keys import DEFAULT_PEER_SHARDS, learners_key, peer_shard, peer_shard_key

logger = logging.getLogger(__name__)

MAX_RECORD_BYTES = 16 * 1024
MAX_FOREIGN_KEYS = 64  # distinct other-run keys counted (bounded: strangers cannot grow it)
DEFAULT_MAX_TTL_S = 300.0  # the longest lifetime a record may claim (a node's own TTLs are far shorter)
VALID_MEMORY = 16384  # digests of records found valid: a record read again is not verified again
# schema(owner peer id, subkey label, payload) raises InvalidRecord if the payload is not acceptable there; a peer
# record's schema returns the decoded record (kept for the reader: `SwarmValidator.peer_record`)
Schema = Callable[[str, str, bytes], object]


def _peer_schema(owner: str, label: str, payload: bytes) -> PeerRecord:
    # the owner's signature over the whole value, this record included, is verified already (`_check`): a record
    # whose peer id is the owner's needs no second check of its own signature by the same key
    record = PeerRecord.decode(payload, check_signature_of=False)
    if label or record.peer_id != owner:
        raise InvalidRecord("peer record stored under another peer's subkey")
    return record


ANNOUNCEMENT_LABEL = "newest"  # a learner's announcement subkey: `newest@<peer id>` (one per learner)


def _version_schema(owner: str, label: str, payload: bytes) -> None:
    announcement = VersionAnnouncement.decode(payload)
    if announcement.peer_id != owner or label != ANNOUNCEMENT_LABEL:
        raise InvalidRecord("version announcement does not match its subkey")


CARD_LABEL = "card"  # a run card's subkey: `card@<storer peer id>` (anyone may store the owner-signed card)


def _card_schema(run_id: str) -> Schema:
    def check(owner: str, label: str, payload: bytes) -> None:
        card = RunCard.decode(payload)  # the owner's signature checked inside
        if label != CARD_LABEL or card.run_id != run_id:
            raise InvalidRecord("run card of another run, or under another label")

    return check


def learner_key(run_id: str, peer_id: str) -> str:
    """A learner's own DHT key: only `peer_id` may write it (its record under the subkey `<peer id>`), so a flood
    of other keys' records, which can fill the run's shared peers key, cannot hide it from whoever asks for it by
    name (samplers and `status` ask for each of `trust.learner_keys`). Self-certifying: a validator needs no
    list of learners to accept it."""
    return f"{run_id}/learner/{peer_id}"


def _own_learner_schema(owner: str, label: str, payload: bytes) -> PeerRecord:
    record = _peer_schema(owner, label, payload)
    if record.role != "learner":
        raise InvalidRecord("a learner key holds its owner's learner record only")
    return record


BOARD_LABEL = "board"  # a learner's contributors board: subkey `board@<peer id>` under its own `board_key`
CURVES_LABEL = "curves"  # its curves over the run: subkey `curves@<peer id>` there


def board_key(run_id: str, peer_id: str) -> str:
    """The DHT key of a learner's board and curves (`swarmnode.board.record`): only `peer_id` may write it, and
    a reader believes it only of a learner it believes (`swarmnode.observe.board_view`)."""
    return f"{run_id}/board/{peer_id}"


def _board_schema(run_id: str) -> Schema:
    def check(owner: str, label: str, payload: bytes) -> None:
        record: BoardRecord | CurveRecord
        if label == BOARD_LABEL:
            record = BoardRecord.decode(payload)
        elif label == CURVES_LABEL:
            record = CurveRecord.decode(payload)
        else:
            raise InvalidRecord(f"a board key holds {BOARD_LABEL}@ and {CURVES_LABEL}@ subkeys only")
        if record.learner != owner or record.run_id != run_id:
            raise InvalidRecord("board of another learner or another run")

    return check


def _shard_schema(shard: int, shards: int) -> Schema:
    """A peer record under shard key `shard`: its owner's record, and the owner's shard is `shard`."""

    def schema(owner: str, label: str, payload: bytes) -> PeerRecord:
        record = _peer_schema(owner, label, payload)
        if peer_shard(owner, shards) != shard:
            raise InvalidRecord(
                f"peer record under shard {shard}, but its owner's shard is "
                f"{peer_shard(owner, shards)} of {shards} (network.peer_shards differs?)"
            )
        return record

    return schema


def run_keys(run_id: str, shards: int = DEFAULT_PEER_SHARDS) -> dict[str, str]:
    """The DHT keys of a run, by short name: `versions`, `card` (the run card), `learners` (the learners' index) and `peers/<shard>` for
    each shard of the peer records (`swarmnode.swarm.peer_keys`)."""
    keys = {"versions": f"{run_id}/versions", "learners": learners_key(run_id), "card": f"{run_id}/card"}
    keys.update({f"peers/{s}": peer_shard_key(run_id, s) for s in range(shards)})
    return keys


def peer_schemas(run_id: str, shards: int) -> dict[str, Schema]:
    """The schema of each key holding the run's peer records: its shards and the learners' index."""
    schemas: dict[str, Schema] = {peer_shard_key(run_id, s): _shard_schema(s, shards) for s in range(shards)}
    schemas[learners_key(run_id)] = _own_learner_schema
    return schemas


def averaging_prefix(run_id: str) -> str:
    """The hivemind averaging prefix of a run's learners (hivemind wants no '.' in it, and run ids may hold one)."""
    return "swarmnode-avg-" + hashlib.sha256(run_id.encode()).hexdigest()[:24]


def averaging_keys(run_id: str) -> list[str]:
    """The DHT keys hivemind's `DecentralizedAverager` uses under `averaging_prefix`: its matchmaking bucket (group
    bits stay empty: no `initial_group_bits`) and the list of peers that share their state."""
    prefix = averaging_prefix(run_id)
    return [f"{prefix}.0b", f"{prefix}.all_averagers"]


AVERAGING_VALUE_BYTES = 16  # a msgpack bool, float or nil


def _averaging_schema(owner: str, label: str, payload: bytes) -> None:
    """An averager's declaration: "looking for a group" (bool) or its state-sharing priority (number or nil)."""
    if label or len(payload) > AVERAGING_VALUE_BYTES:
        raise InvalidRecord("averaging record: unlabelled subkey and a small scalar expected")
    try:
        value = msgpack.unpackb(payload)
    except Exception:  # msgpack raises many types
        raise InvalidRecord("averaging record: not msgpack") from None
    if value is not None and not isinstance(value, (bool, int, float)):
        raise InvalidRecord("averaging record: a bool, a number or nil expected")


def owned_subkey(peer_id: str, label: str = "") -> str:
    """The subkey a peer may write: its peer id, optionally prefixed by `label@`."""
    return f"{label}@{peer_id}" if label else peer_id


def split_subkey(subkey: str) -> tuple[str, str]:
    """(label, owner peer id) of an owned subkey."""
    label, _, owner = subkey.rpartition("@")
    return label, owner


class SwarmValidator(RecordValidatorBase):
    """Signs this node's records with `identity` and validates everyone's for run `run_id`."""

    def __init__(
        self,
        run_id: str,
        identity: Identity,
        extra_schemas: dict[str, Schema] | None = None,
        max_ttl: float = DEFAULT_MAX_TTL_S,
        shards: int = DEFAULT_PEER_SHARDS,
    ):
        self.run_id, self.shards = run_id, shards
        schemas: dict[str, Schema] = {
            f"{run_id}/versions": _version_schema,
            f"{run_id}/card": _card_schema(run_id),
            **peer_schemas(run_id, shards),
        }
        schemas.update({key: _averaging_schema for key in averaging_keys(run_id)})
        schemas.update(extra_schemas or {})
        self._schemas = {DHTID.generate(source=key).to_bytes(): schema for key, schema in schemas.items()}
        self._identity = identity
        self.max_ttl = max_ttl
        self.rejected = 0  # records refused since start (for health output)
        self.foreign_keys: Counter[bytes] = Counter()  # refusals by key (hashed): other runs' records, see `runs_seen`
        self._valid: OrderedDict[bytes, None] = OrderedDict()  # see `validate`
        # payload digest -> decoded, the newest record of each peer only (`peer_record`): a heartbeat's record
        # replaces its peer's previous one, so the cache holds one record a peer, not one a heartbeat
        self._records: OrderedDict[bytes, PeerRecord] = OrderedDict()
        self._newest_of: dict[str, bytes] = {}  # peer id -> the digest of its record in `_records`

    def runs_seen(self, candidates: list[str]) -> dict[str, int]:
        """Refused records by run id, for the candidate run ids whose keys they were under (a DHT key is a hash:
        other run ids cannot be read back); the rest under "other"."""
        names = {
            DHTID.generate(source=key).to_bytes(): run
            for run in candidates
            for key in run_keys(run, self.shards).values()
        }
        seen: Counter[str] = Counter()
        for key, count in self.foreign_keys.items():
            seen[names.get(key, "other")] += count
        return dict(seen)

    def also_read_peers_of(self, run_id: str) -> None:
        """Accept peer records of run `run_id` too: a status client naming the runs a DHT holds (read only)."""
        for key, schema in peer_schemas(run_id, self.shards).items():
            self._schemas.setdefault(DHTID.generate(source=key).to_bytes(), schema)

    @staticmethod
    def signed_bytes(record: DHTRecord, value: bytes) -> bytes:
        """What the owner signs: the key, subkey, value and expiration time together."""
        return pack({"k": record.key, "s": record.subkey, "v": value, "e": record.expiration_time})

    def sign_value(self, record: DHTRecord) -> bytes:
        return record.value + self._identity.sign(self.signed_bytes(record, record.value))

    def strip_value(self, record: DHTRecord) -> bytes:
        return record.value[:-SIGNATURE_BYTES]

    def validate(self, record: DHTRecord) -> bool:
        """Whether `record` may be stored or read. A record already found valid (same key, subkey, value and
        expiration) is not verified again: every DHT read returns every subkey of a key, and two signature checks
        per record per read made a key holding hundreds of records cost seconds of CPU each heartbeat."""
        digest = hashlib.blake2b(
            b"%d:%d:" % (len(record.key), len(record.subkey))
            + record.key
            + record.subkey
            + record.value
            + struct.pack("<d", record.expiration_time),
            digest_size=16,
        ).digest()
        if digest in self._valid:
            self._valid.move_to_end(digest)
            return record.expiration_time <= get_dht_time() + self.max_ttl  # still within the lifetime cap
        try:
            self._check(record)
        except InvalidRecord as exc:
            self.rejected += 1
            logger.info("rejected DHT record: %s", exc)
            return False
        self._valid[digest] = None
        if len(self._valid) > VALID_MEMORY:
            self._valid.popitem(last=False)
        return True

    def _learner_key_schema(self, record: DHTRecord) -> Schema | None:
        """`_own_learner_schema` when `record` sits under its subkey owner's own `learner_key`, else None."""
        subkey = _loads(record.subkey, 512)
        if not isinstance(subkey, str):
            return None
        label, owner = split_subkey(subkey)
        if label or DHTID.generate(source=learner_key(self.run_id, owner)).to_bytes() != record.key:
            return None
        return _own_learner_schema

    def _board_key_schema(self, record: DHTRecord) -> Schema | None:
        """`_board_schema` when `record` sits under its subkey owner's own `board_key`, else None."""
        subkey = _loads(record.subkey, 512)
        if not isinstance(subkey, str):
            return None
        _, owner = split_subkey(subkey)
        if DHTID.generate(source=board_key(self.run_id, owner)).to_bytes() != record.key:
            return None
        return _board_schema(self.run_id)

    def _check(self, record: DHTRecord) -> None:
        schema = self._schemas.get(record.key) or self._learner_key_schema(record) or self._board_key_schema(record)
        if schema is None:
            if record.key in self.foreign_keys or len(self.foreign_keys) < MAX_FOREIGN_KEYS:
                self.foreign_keys[record.key] += 1
            raise InvalidRecord(
                "key is not one of this run's keys (a node of another run id shares this DHT; "
                "`swarmnode status` names the runs it finds)"
            )
        if record.expiration_time > get_dht_time() + self.max_ttl:
            raise InvalidRecord(
                f"expires {record.expiration_time - get_dht_time():.0f} s from now, "
                f"beyond the cap of {self.max_ttl:.0f} s"
            )
        if len(record.value) > MAX_RECORD_BYTES:
            raise InvalidRecord(f"value of {len(record.value)} bytes exceeds {MAX_RECORD_BYTES}")
        if len(record.value) <= SIGNATURE_BYTES:
            raise InvalidRecord("value too short to hold a signature")
        subkey = _loads(record.subkey, 512)
        if not isinstance(subkey, str):
            raise InvalidRecord("subkey must be text naming its owner")
        label, owner = split_subkey(subkey)
        value, signature = record.value[:-SIGNATURE_BYTES], record.value[-SIGNATURE_BYTES:]
        if not verify(owner, self.signed_bytes(record, value), signature):
            raise InvalidRecord(f"signature does not match subkey owner {owner[:16]}...")
        payload = _loads(value, MAX_RECORD_BYTES)
        if not isinstance(payload, bytes):
            raise InvalidRecord("value must be a binary record")
        decoded = schema(owner, label, payload)
        if isinstance(decoded, PeerRecord):
            self._keep_record(_digest(payload), decoded)

    def _keep_record(self, digest: bytes, record: PeerRecord) -> None:
        """Keep `record` for `peer_record`, in place of its peer's previous record (bounded by VALID_MEMORY peers)."""
        previous = self._newest_of.get(record.peer_id)
        if previous is not None and previous != digest:
            old = self._records.pop(previous, None)
            if old is not None and old.timestamp > record.timestamp:  # an older record read late: keep the newer
                self._records[previous] = old
                return
        self._records[digest] = record
        self._records.move_to_end(digest)
        self._newest_of[record.peer_id] = digest
        if len(self._records) > VALID_MEMORY:
            _, evicted = self._records.popitem(last=False)
            if self._newest_of.get(evicted.peer_id) not in self._records:
                self._newest_of.pop(evicted.peer_id, None)

    def peer_record(self, payload: bytes) -> PeerRecord | None:
        """The PeerRecord of `payload` as this validator decoded it when it accepted it (its owner's signature
        verified), or None if it holds none: a reader need not decode and verify it a second time."""
        return self._records.get(_digest(payload))

    def merge_with(self, other: RecordValidatorBase) -> bool:
        return False


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=16).digest()


def _loads(data: bytes, limit: int) -> object:
    try:
        return msgpack.unpackb(
            data, raw=False, max_bin_len=limit, max_str_len=limit, max_array_len=0, max_map_len=0, max_ext_len=0
        )
    except Exception as exc:  # msgpack raises many types
        raise InvalidRecord(f"not a msgpack scalar ({type(exc).__name__})") from None
