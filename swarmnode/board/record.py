"""The records a learner publishes of its tally and its curves: signed by the learner, bounded in size.

`BoardRecord`: the top keys of the learner's tally (`BOARD_TOP` at most, fewer when that is what fits in
`MAX_BOARD_BYTES`), each with groups, tokens, first and last seen and its refusals by reason, plus the count
and sums of the rest and the run's totals. `CurveRecord`: the learner's curves (`board.curves`, at most
`MAX_POINTS` points a metric). Both carry the learner's peer id and the run id and are signed by the learner's
key over every other field (`kind` keeps one record's signature from passing as the other's); `decode` checks
every field's type and bound and the signature, and raises only `InvalidRecord`. A reader believes a board only
from a learner it believes (`trust.learner_keys`; see `swarmnode.observe.board_view`).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from swarmnode.board.curves import MAX_POINTS, METRICS, Curves
from swarmnode.board.tally import MAX_REASON_CHARS, MAX_REASONS, ContributorTally
from swarmnode.identity import Identity
from swarmnode.protocol import codec
from swarmnode.protocol.codec import InvalidRecord, pack, unpack

BOARD_TOP = 64
MAX_BOARD_BYTES = 14 * 1024  # under the DHT's 16 KiB value with its framing and the DHT signature
MAX_CURVE_BYTES = 14 * 1024
_BIG = 2**62


def _count(value: Any, where: str) -> int:
    return codec.int_field({where: value}, where, 0, _BIG)


def _time(value: Any, where: str) -> float:
    return codec.float_field({where: value}, where, 0.0, 1e11)


@dataclass
class BoardEntry:
    """One key's line: groups and completion tokens trained, first and last seen, groups refused by reason."""

    peer_id: str
    groups: int
    tokens: int
    first: float
    last: float
    refused: dict[str, int] = field(default_factory=dict)

    def wire(self) -> list[Any]:
        return [self.peer_id, self.groups, self.tokens, self.first, self.last, self.refused]

    @classmethod
    def parse(cls, item: Any) -> BoardEntry:
        if not isinstance(item, (list, tuple)) or len(item) != 6:
            raise InvalidRecord("board entry: a list of 6 fields expected")
        peer_id, groups, tokens, first, last, refused = item
        if not isinstance(peer_id, str) or not 8 <= len(peer_id) <= 128:
            raise InvalidRecord("board entry: peer id of 8..128 characters expected")
        if not isinstance(refused, dict) or len(refused) > MAX_REASONS + 1:
            raise InvalidRecord(f"board entry: at most {MAX_REASONS + 1} refusal reasons")
        reasons = {}
        for reason, n in refused.items():
            if not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON_CHARS:
                raise InvalidRecord("board entry: a refusal reason of 1..40 characters expected")
            reasons[reason] = _count(n, "refused")
        return cls(
            peer_id,
            _count(groups, "groups"),
            _count(tokens, "tokens"),
            _time(first, "first"),
            _time(last, "last"),
            reasons,
        )


@dataclass
class BoardRecord:
    """A learner's published tally (see the module docstring)."""

    learner: str
    run_id: str
    at: float
    entries: list[BoardEntry]
    samplers: int  # keys tallied in all (the entries and the rest)
    groups: int  # totals over every key
    tokens: int
    refused: int
    kind: str = "board"
    signature: bytes = b""

    def _fields(self) -> dict[str, Any]:
        body = asdict(self)
        body.pop("signature")
        body["entries"] = [e.wire() for e in self.entries]
        return body

    @classmethod
    def of(cls, tally: ContributorTally, identity: Identity, run_id: str, top: int = BOARD_TOP) -> BoardRecord:
        """The signed board of `tally`: its `top` keys, fewer if they would not fit `MAX_BOARD_BYTES`."""
        ranked = tally.top(top)
        while True:
            record = cls(
                identity.peer_id,
                run_id,
                time.time(),
                [BoardEntry(k, e.groups, e.tokens, e.first, e.last, dict(e.refused)) for k, e in ranked],
                tally.samplers,
                tally.groups,
                tally.tokens,
                tally.refused,
            )
            record.signature = codec.sign_fields(record._fields(), identity)
            if len(record.encode()) <= MAX_BOARD_BYTES or not ranked:
                return record
            ranked = ranked[: len(ranked) * 3 // 4]

    def encode(self) -> bytes:
        return pack({**self._fields(), "signature": self.signature})

    @classmethod
    def decode(cls, data: bytes) -> BoardRecord:
        """Parse, bound-check and verify the learner's signature; raises only InvalidRecord."""
        obj = unpack(data, MAX_BOARD_BYTES, max_containers=4 * BOARD_TOP + 8)
        if set(obj) != set(cls.__dataclass_fields__):
            raise InvalidRecord("board record: unexpected fields")
        if obj["kind"] != "board":
            raise InvalidRecord("not a board record")
        record = cls(
            learner=codec.str_field(obj, "learner", 128, 8),
            run_id=codec.str_field(obj, "run_id", 64, 1),
            at=_time(obj["at"], "at"),
            entries=codec.list_field(obj, "entries", BOARD_TOP, BoardEntry.parse),
            samplers=_count(obj["samplers"], "samplers"),
            groups=_count(obj["groups"], "groups"),
            tokens=_count(obj["tokens"], "tokens"),
            refused=_count(obj["refused"], "refused"),
            signature=codec.bytes_field(obj, "signature", 64, exact=64),
        )
        codec.check_signature(record._fields(), record.learner, record.signature)
        return record

    def rest(self) -> dict[str, int]:
        """The keys beyond the entries, together: how many, and their groups, tokens and refusals."""
        return {
            "samplers": max(0, self.samplers - len(self.entries)),
            "groups": max(0, self.groups - sum(e.groups for e in self.entries)),
            "tokens": max(0, self.tokens - sum(e.tokens for e in self.entries)),
            "refused": max(0, self.refused - sum(sum(e.refused.values()) for e in self.entries)),
        }


def _series_item(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRecord("curve point: a finite number or nil expected")
    return float(value)


@dataclass
class CurveRecord:
    """A learner's published curves: `series` maps `step` and each of `METRICS` to aligned lists."""

    learner: str
    run_id: str
    at: float
    span: int  # steps per point
    series: dict[str, list[Any]]
    kind: str = "curves"
    signature: bytes = b""

    def _fields(self) -> dict[str, Any]:
        body = asdict(self)
        body.pop("signature")
        return body

    @classmethod
    def of(cls, curves: Curves, identity: Identity, run_id: str) -> CurveRecord:
        record = cls(identity.peer_id, run_id, time.time(), curves.span, curves.series())
        record.signature = codec.sign_fields(record._fields(), identity)
        return record

    def encode(self) -> bytes:
        return pack({**self._fields(), "signature": self.signature})

    @classmethod
    def decode(cls, data: bytes) -> CurveRecord:
        """Parse, bound-check and verify the learner's signature; raises only InvalidRecord."""
        obj = unpack(data, MAX_CURVE_BYTES, max_array_len=MAX_POINTS, max_containers=len(METRICS) + 4)
        if set(obj) != set(cls.__dataclass_fields__) or obj["kind"] != "curves":
            raise InvalidRecord("not a curve record")
        series = obj["series"]
        if not isinstance(series, dict) or set(series) != {"step", *METRICS}:
            raise InvalidRecord(f"curve record: series of step and {', '.join(METRICS)} expected")
        steps = codec.list_field(series, "step", MAX_POINTS, lambda v: _count(v, "step"))
        clean: dict[str, list[Any]] = {"step": steps}
        for metric in METRICS:
            clean[metric] = codec.list_field(series, metric, MAX_POINTS, _series_item)
            if len(clean[metric]) != len(steps):
                raise InvalidRecord(f"curve record: {metric} not aligned with step")
        record = cls(
            learner=codec.str_field(obj, "learner", 128, 8),
            run_id=codec.str_field(obj, "run_id", 64, 1),
            at=_time(obj["at"], "at"),
            span=codec.int_field(obj, "span", 1, _BIG),
            series=clean,
            signature=codec.bytes_field(obj, "signature", 64, exact=64),
        )
        codec.check_signature(record._fields(), record.learner, record.signature)
        return record
