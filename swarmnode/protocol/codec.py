"""The codec every record shares: msgpack (never pickle), hard size limits, strict field checks, signatures.

Decoding never raises anything but `InvalidRecord` with a reason: records come from strangers.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any, TypeVar, overload

import msgpack

from swarmnode.errors import SwarmnodeError
from swarmnode.identity import Identity, verify

T = TypeVar("T")
MAX_VERSION = 2**53  # the largest policy version any record carries: an integer JSON (status --json) keeps exact


class InvalidRecord(SwarmnodeError, ValueError):
    """A record that failed decoding or validation; `str(exc)` is the reason, fit for a log line."""


def pack(obj: dict[str, Any]) -> bytes:
    """Canonical msgpack bytes of a plain dict (bin for bytes, str for text)."""
    return msgpack.packb(obj, use_bin_type=True)


def unpack(
    data: bytes,
    max_bytes: int,
    *,
    max_array_len: int | None = None,
    max_containers: int | None = None,
    max_map_len: int = 1024,
) -> dict[str, Any]:
    """Decode msgpack bytes into a dict, enforcing `max_bytes` before parsing anything.

    `max_array_len` bounds every array's element count and `max_containers` the number of arrays and maps in
    the whole record; both are checked while decoding and stop it at the first excess, so a frame of millions
    of tiny nested arrays costs microseconds, not seconds and gigabytes (without them, up to `max_bytes` each).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidRecord(f"expected bytes, got {type(data).__name__}")
    if len(data) > max_bytes:
        raise InvalidRecord(f"record of {len(data)} bytes exceeds the limit of {max_bytes}")
    budget = _ContainerBudget(max_containers)
    try:
        obj = msgpack.unpackb(
            bytes(data),
            raw=False,
            strict_map_key=True,
            max_bin_len=max_bytes,
            max_str_len=max_bytes,
            max_array_len=max_bytes if max_array_len is None else max_array_len,
            max_map_len=max_map_len,
            max_ext_len=0,
            list_hook=budget.list if max_containers is not None else None,
            object_hook=budget.map if max_containers is not None else None,
        )
    except InvalidRecord:
        raise
    except Exception as exc:  # msgpack raises many types (ExtraData, ValueError, TypeError, ...)
        reason = str(exc)[:80] if "exceeds max_" in str(exc) else type(exc).__name__  # "33 exceeds max_array_len(32)"
        raise InvalidRecord(f"not valid msgpack ({reason})") from None
    if not isinstance(obj, dict):
        raise InvalidRecord(f"top level must be a map, got {type(obj).__name__}")
    return obj


def unpack_record(
    data: bytes, max_bytes: int, kind: str, version: int, wire_fields: frozenset[str], **bounds: int
) -> dict[str, Any]:
    """`unpack` (with `bounds`: max_array_len, max_containers, max_map_len), then the checks every strict record
    shares: no unknown field, the right `kind`, wire version."""
    obj = unpack(data, max_bytes, **bounds)
    extra = set(obj) - wire_fields
    if extra:
        raise InvalidRecord(f"unknown field {sorted(map(str, extra))[0]!r}")
    if obj.get("kind") != kind:
        raise InvalidRecord(f"field 'kind' must be {kind!r}")
    int_field(obj, "v", version, version)
    return obj


def decode_guarded(parse: Callable[[], T], what: str) -> T:
    """`parse()`, with any error but InvalidRecord turned into one: a validator bug must not become a crash."""
    try:
        return parse()
    except InvalidRecord:
        raise
    except Exception as exc:  # defence in depth: records come from strangers
        raise InvalidRecord(f"malformed {what} ({type(exc).__name__})") from None


def content_id(content: dict[str, Any]) -> str:
    """sha256 hex of the canonical encoding: the id of a content-addressed record."""
    return hashlib.sha256(pack(content)).hexdigest()


def check_content(
    content: dict[str, Any], id_field: str, claimed_id: str, signer_peer_id: str, signature: bytes
) -> None:
    """Raise InvalidRecord unless `claimed_id` is the content's hash and the signature over the content plus
    `{id_field: claimed_id}` was made by `signer_peer_id`."""
    if content_id(content) != claimed_id:
        raise InvalidRecord(f"{id_field} does not match the content hash")
    check_signature({**content, id_field: claimed_id}, signer_peer_id, signature)


class _ContainerBudget:
    """Counts the arrays and maps a decode builds; raises InvalidRecord (stopping the decode) past the limit."""

    def __init__(self, limit: int | None):
        self.limit, self.used = limit, 0

    def _take(self) -> None:
        self.used += 1
        if self.limit is not None and self.used > self.limit:
            raise InvalidRecord(f"more than {self.limit} arrays/maps in one record")

    def list(self, value: list) -> list:
        self._take()
        return value

    def map(self, value: dict) -> dict:
        self._take()
        return value


def field(obj: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """`obj[name]`, checked to be of `kind` (bool is never accepted as int)."""
    if name not in obj:
        raise InvalidRecord(f"missing field {name!r}")
    value = obj[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise InvalidRecord(f"field {name!r} must be {_names(kinds)}, got bool")
    if not isinstance(value, kinds):
        raise InvalidRecord(f"field {name!r} must be {_names(kinds)}, got {type(value).__name__}")
    return value


def int_field(obj: dict[str, Any], name: str, lo: int, hi: int) -> int:
    value = field(obj, name, int)
    if not lo <= value <= hi:
        raise InvalidRecord(f"field {name!r}={value} outside [{lo}, {hi}]")
    return value


def float_field(obj: dict[str, Any], name: str, lo: float = -math.inf, hi: float = math.inf) -> float:
    value = float(field(obj, name, (int, float)))
    if not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidRecord(f"field {name!r}={value} not finite or outside [{lo}, {hi}]")
    return value


def str_field(obj: dict[str, Any], name: str, max_len: int, min_len: int = 0) -> str:
    value = field(obj, name, str)
    if not min_len <= len(value) <= max_len:
        raise InvalidRecord(f"field {name!r} length {len(value)} outside [{min_len}, {max_len}]")
    return value


def bytes_field(obj: dict[str, Any], name: str, max_len: int, exact: int | None = None) -> bytes:
    value = field(obj, name, (bytes, bytearray))
    if exact is not None and len(value) != exact:
        raise InvalidRecord(f"field {name!r} must be {exact} bytes, got {len(value)}")
    if len(value) > max_len:
        raise InvalidRecord(f"field {name!r} of {len(value)} bytes exceeds {max_len}")
    return bytes(value)


@overload
def list_field(obj: dict[str, Any], name: str, max_len: int) -> list[Any]: ...
@overload
def list_field(obj: dict[str, Any], name: str, max_len: int, item: Callable[[Any], T]) -> list[T]: ...
def list_field(obj: dict[str, Any], name: str, max_len: int, item: Callable[[Any], T] | None = None) -> list[Any]:
    """A list of at most `max_len` items, each passed through `item` (which raises InvalidRecord)."""
    value = field(obj, name, (list, tuple))
    if len(value) > max_len:
        raise InvalidRecord(f"field {name!r} has {len(value)} items, limit {max_len}")
    return [item(v) for v in value] if item else list(value)


def sign_fields(fields: dict[str, Any], identity: Identity) -> bytes:
    """Signature over the canonical encoding of `fields` (which must not contain the signature)."""
    return identity.sign(pack(fields))


def check_signature(fields: dict[str, Any], signer_peer_id: str, signature: bytes) -> None:
    """Raise InvalidRecord unless `signature` over `fields` was made by `signer_peer_id`'s key."""
    if not verify(signer_peer_id, pack(fields), signature):
        raise InvalidRecord(f"bad signature (claimed signer {signer_peer_id[:16]}...)")


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kinds)


class SignedGroup:
    """What every signed group record shares: its id is the hash of its content, its signature covers content
    and id. A subclass provides `_content()` and the fields `group_id` and `signature`."""

    group_id: str
    signature: bytes

    def _content(self) -> dict[str, Any]:
        raise NotImplementedError

    def _seal(self, identity: Identity):
        """Set the content-hash id and sign; returns self."""
        content = self._content()
        self.group_id = content_id(content)
        self.signature = sign_fields({**content, "group_id": self.group_id}, identity)
        return self

    def encode(self) -> bytes:
        """The msgpack wire form."""
        return pack({**self._content(), "group_id": self.group_id, "signature": self.signature})
