"""PeerRecord: what a node advertises about itself in the run's DHT (role, hardware, versions, health).

Each node writes its own record under `<run>/peers` (subkey = its peer id) on every heartbeat. The record is
signed by the node's key, so it can be checked wherever it travels (DHT, dashboard, logs).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from swarmnode.identity import Identity
from swarmnode.protocol.codec import (
    MAX_VERSION,
    InvalidRecord,
    bytes_field,
    check_signature,
    float_field,
    int_field,
    list_field,
    pack,
    sign_fields,
    str_field,
    unpack,
)
from swarmnode.protocol.public_name import MAX_NAME_CHARS

MAX_PEER_RECORD_BYTES = 16 * 1024
ROLES = ("bootstrap", "sampler", "learner", "auto", "client")
STATES = ("up", "leaving")
Role = Literal["bootstrap", "sampler", "learner", "auto", "client"]
_MAX_MAP_ITEMS = 48  # a learner of several (averaging) fills ~35 health fields
_MAX_KEY_LEN = 40
_MAX_TEXT_LEN = 128
_MAX_LIST_ITEMS = 32  # e.g. a learner's reward history over its last 32 versions
MAX_LISTED_VERSIONS = 64  # versions a node advertises it can serve: its newest ones (it may keep more)


def _scalar(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > 2**62:
            raise InvalidRecord(f"{where}: integer out of range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRecord(f"{where}: not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > _MAX_TEXT_LEN:
            raise InvalidRecord(f"{where}: text longer than {_MAX_TEXT_LEN}")
        return value
    raise InvalidRecord(f"{where}: {type(value).__name__} is not a scalar")


def small_map(value: Any, name: str, allow_lists: bool) -> dict[str, Any]:
    """A bounded dict of scalars (and, if allowed, short lists of scalars); raises InvalidRecord otherwise."""
    if not isinstance(value, dict):
        raise InvalidRecord(f"field {name!r} must be a map")
    if len(value) > _MAX_MAP_ITEMS:
        raise InvalidRecord(f"field {name!r} has {len(value)} entries, limit {_MAX_MAP_ITEMS}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not 0 < len(key) <= _MAX_KEY_LEN:
            raise InvalidRecord(f"field {name!r}: keys must be text of 1..{_MAX_KEY_LEN} chars")
        where = f"{name}.{key}"
        if allow_lists and isinstance(item, (list, tuple)):
            if len(item) > _MAX_LIST_ITEMS:
                raise InvalidRecord(f"{where}: list longer than {_MAX_LIST_ITEMS}")
            out[key] = [_scalar(v, where) for v in item]
        else:
            out[key] = _scalar(item, where)
    return out


def _version(v: Any) -> int:
    return int_field({"v": v}, "v", 0, MAX_VERSION)


def _maddr(v: Any) -> str:
    return str_field({"addr": v}, "addr", 256, 4)


@dataclass
class PeerRecord:
    """One node's advertisement. `version` is the policy version held (-1: none yet)."""

    peer_id: str
    role: str
    session: str = ""
    state: str = "up"
    hardware: dict[str, Any] = field(default_factory=dict)
    version: int = -1
    versions: list[int] = field(default_factory=list)
    throughput: float = 0.0
    software: str = ""
    addrs: list[str] = field(default_factory=list)
    health: dict[str, Any] = field(default_factory=dict)
    timestamp: float = 0.0
    name: str = ""  # the node's public name (`protocol.public_name`): shown, never trusted
    signature: bytes = b""

    def _fields(self) -> dict[str, Any]:
        body = asdict(self)
        body.pop("signature")
        if not body["name"]:  # a record without a name is byte for byte what nodes before names wrote
            body.pop("name")
        return body

    @classmethod
    def create(cls, identity: Identity, **values: Any) -> PeerRecord:
        """A record for `identity`, timestamped now and signed; validated so a bad field fails at the source."""
        values.setdefault("timestamp", time.time())
        if "versions" in values:  # a store keeping more (learner.keep_versions) lists its newest
            values["versions"] = sorted(values["versions"])[-MAX_LISTED_VERSIONS:]
        record = cls(peer_id=identity.peer_id, **values)
        record.signature = sign_fields(record._fields(), identity)
        encoded = record.encode()
        return cls.decode(encoded)

    def encode(self) -> bytes:
        return pack({**self._fields(), "signature": self.signature})

    @classmethod
    def decode(cls, data: bytes, *, check_signature_of: bool = True) -> PeerRecord:
        """Parse, check every field's type and bounds, and verify the signature; raises only InvalidRecord.
        `check_signature_of=False` skips the signature check: only for bytes whose signer is proven otherwise (the
        DHT validator has verified the owner's signature over these very bytes)."""
        obj = unpack(data, MAX_PEER_RECORD_BYTES)
        allowed = set(cls.__dataclass_fields__)
        extra = set(obj) - allowed
        if extra:
            raise InvalidRecord(f"unknown fields {sorted(extra)[:4]}")
        role = str_field(obj, "role", 16)
        if role not in ROLES:
            raise InvalidRecord(f"role {role!r} not one of {ROLES}")
        state = str_field(obj, "state", 16)
        if state not in STATES:
            raise InvalidRecord(f"state {state!r} not one of {STATES}")
        version = int_field(obj, "version", -1, MAX_VERSION)
        record = cls(
            peer_id=str_field(obj, "peer_id", 128, 8),
            role=role,
            session=str_field(obj, "session", 32),
            state=state,
            hardware=small_map(obj.get("hardware"), "hardware", allow_lists=False),
            version=version,
            versions=list_field(obj, "versions", MAX_LISTED_VERSIONS, _version),
            throughput=float_field(obj, "throughput", 0.0, 1e15),
            software=str_field(obj, "software", 64),
            addrs=list_field(obj, "addrs", 8, _maddr),
            health=small_map(obj.get("health"), "health", allow_lists=True),
            timestamp=float_field(obj, "timestamp", 0.0, 1e11),
            name=str_field(obj, "name", MAX_NAME_CHARS) if "name" in obj else "",
            signature=bytes_field(obj, "signature", 64, exact=64),
        )
        if check_signature_of:
            check_signature(record._fields(), record.peer_id, record.signature)
        return record

    def age(self, now: float | None = None) -> float:
        """Seconds since this record was written (clamped at 0 for clock skew)."""
        return max(0.0, (time.time() if now is None else now) - self.timestamp)

    def summary(self, now: float | None = None) -> dict[str, Any]:
        """A JSON-friendly view for `status` and the dashboard (no signature)."""
        body = self._fields()
        body["name"] = self.name
        body["age_s"] = round(self.age(now), 3)
        return body


def software_build(software: str) -> str:
    """The build a record's `software` field names (`swarmnode/0.2.0 card/3` -> `0.2.0`; `unknown`: not said)."""
    name, _, build = software.partition(" ")[0].partition("/")
    return build if name == "swarmnode" and build else "unknown"
