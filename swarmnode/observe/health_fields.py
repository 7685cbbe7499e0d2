"""The health fields as the derived outputs see them: one `FieldSpec` per field of the role records
(`health_record`), by name (`FIELDS`, and `WIRE_FIELDS`, what the DHT record carries), with its JSON schema and a
check that a value fits its type. Standard library only, as the records are.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Union

from swarmnode.observe.health_record import RECORDS


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One health field as the derived outputs see it."""

    name: str
    type: Any  # the Python type without None: int, float, str, list[int], list[float | None], dict[str, int]
    help: str
    metric: str | None
    kind: str
    label: str | None
    labels_from: str | None
    minimum: float | None
    maximum: float | None
    wire: bool
    roles: tuple[str, ...]

    @property
    def json_schema(self) -> dict[str, Any]:
        """The field's JSON Schema (what `status --json` may hold under `health`)."""
        return type_schema(self.type, self.minimum, self.maximum)


def _without_none(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        return rest[0] if len(rest) == 1 else Union[tuple(rest)]  # noqa: UP007 (built from a runtime tuple)
    return tp


_JSON_TYPES = {int: "integer", float: "number", str: "string"}


def type_schema(tp: Any, minimum: float | None = None, maximum: float | None = None) -> dict[str, Any]:
    """The JSON Schema of a field's Python type (`int`, `list[float | None]`, `dict[str, int]` ...), within bounds."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        return {"type": "array", "items": type_schema(args[0], minimum, maximum)}
    if origin is dict:
        return {"type": "object", "additionalProperties": type_schema(args[1], minimum, maximum)}
    if origin in (Union, types.UnionType):  # float | None inside a list: a gap
        names = [_JSON_TYPES[a] if a is not type(None) else "null" for a in args]
        out: dict[str, Any] = {"type": names}
    else:
        out = {"type": _JSON_TYPES[tp]}
    if minimum is not None:
        out["minimum"] = minimum
    if maximum is not None:
        out["maximum"] = maximum
    return out


def _collect() -> dict[str, FieldSpec]:
    out: dict[str, FieldSpec] = {}
    for cls in RECORDS:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            roles = tuple(r for c in RECORDS if f.name in {g.name for g in dataclasses.fields(c)} for r in c.ROLES)
            out.setdefault(f.name, FieldSpec(f.name, _without_none(hints[f.name]), roles=roles, **f.metadata))
    return out


FIELDS: dict[str, FieldSpec] = _collect()  # every health field of every role, by name
WIRE_FIELDS: dict[str, FieldSpec] = {k: f for k, f in FIELDS.items() if f.wire}  # what the DHT record carries


def check_value(spec: FieldSpec, value: Any) -> bool:
    """Whether `value` fits the field's type (finite numbers only, no bools; lists checked item by item)."""
    return _fits(spec.type, value)


def _fits(tp: Any, value: Any) -> bool:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list:
        return isinstance(value, (list, tuple)) and all(_fits(args[0], v) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_fits(args[1], v) for v in value.values())
    if origin in (Union, types.UnionType):
        return any(_fits(a, value) for a in args)
    if tp is type(None):
        return value is None
    if isinstance(value, bool):
        return False
    if tp is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    return isinstance(value, tp)


# ---------------------------------------------------------------------------------- documented tables
