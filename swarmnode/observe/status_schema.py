"""The JSON schema of `swarmnode status --json` (schema_version 2: each peer's `reachability` and the run's
counts by reachability) and a validator for it.

`validate(doc)` uses the `jsonschema` package when it is installed and a small built-in validator (the subset of
JSON Schema used below: type, required, properties, additionalProperties, items, enum, minimum, maximum)
otherwise. docs/status-and-metrics.md ("Status JSON") describes the fields in words.
"""

from __future__ import annotations

from typing import Any

from swarmnode.errors import SwarmnodeError
from swarmnode.observe.board_schema import BOARD_SCHEMA, CURVES_SCHEMA
from swarmnode.observe.health_fields import WIRE_FIELDS
from swarmnode.protocol.reachability import REACHABILITIES

STATUS_SCHEMA_VERSION = 2

_COUNT = {"type": "integer", "minimum": 0}
_SCALAR = {"type": ["number", "string", "boolean", "null"]}

HEALTH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "the node's health record (keys by role: swarmnode.observe.health_record, docs/status-and-metrics.md)",
    "properties": {name: spec.json_schema for name, spec in WIRE_FIELDS.items()},
    "additionalProperties": False,
}

PEER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "peer_id",
        "role",
        "session",
        "state",
        "hardware",
        "version",
        "versions",
        "throughput",
        "software",
        "addrs",
        "health",
        "timestamp",
        "age_s",
        "lag",
        "reachability",
    ],
    "properties": {
        "peer_id": {"type": "string"},
        "role": {"enum": ["bootstrap", "sampler", "learner", "auto", "client"]},
        "session": {"type": "string"},
        "state": {"enum": ["up", "leaving"]},
        "hardware": {"type": "object", "additionalProperties": _SCALAR},
        "version": {"type": "integer", "minimum": -1},
        "versions": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "throughput": {"type": "number", "minimum": 0},
        "software": {"type": "string"},
        "addrs": {"type": "array", "items": {"type": "string"}},
        "health": HEALTH_SCHEMA,
        "timestamp": {"type": "number", "minimum": 0},
        "age_s": {"type": "number", "minimum": 0},
        "lag": {"type": ["integer", "null"], "minimum": 0},
        "reachability": {
            "enum": list(REACHABILITIES),
            "description": "public: dialled directly; relayed: through "
            "a bootstrap's relay; client-only: nobody can dial it; unknown: not said (older node)",
        },
        "name": {"type": "string", "description": "its public name as shown (mended under the reader's policy)"},
        "designated": {
            "type": "boolean",
            "description": "a learner: one of trust.learner_keys (false: it only "
            "says it is a learner; its figures and reports are left out of the summary and alerts)",
        },
    },
    "additionalProperties": False,
}

ALERT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["kind", "severity", "peer_id", "message"],
    "properties": {
        "kind": {
            "enum": [
                "no_learner",
                "too_stale",
                "invalid_data",
                "reward_collapse",
                "learner_relayed",
                "self_declared_learner",
                "old_card",
                "sampler_undelivered",
                "sampler_kl",
                "learner_stalled",
            ]
        },
        "severity": {"enum": ["error", "warning"]},
        "peer_id": {"type": ["string", "null"]},
        "message": {"type": "string"},
    },
    "additionalProperties": False,
}

_ESTIMATE = {
    "type": "object",
    "required": ["estimate", "low", "high"],
    "additionalProperties": False,
    "properties": {"estimate": _COUNT, "low": _COUNT, "high": _COUNT},
}
_ESTIMATES = {"type": "object", "additionalProperties": _ESTIMATE}

CENSUS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "how the run-wide counts were made: every shard of the peer records read (exact) or a sample "
    "of them (each count an estimate with its 95 % interval; the learners are always counted exactly)",
    "required": ["exact", "shards", "shards_read", "records_read", "count", "roles", "reachability", "versions"],
    "properties": {
        "exact": {"type": "boolean"},
        "shards": _COUNT,
        "shards_read": _COUNT,
        "records_read": _COUNT,
        "count": _ESTIMATE,
        "roles": _ESTIMATES,
        "reachability": _ESTIMATES,
        "versions": _ESTIMATES,
    },
    "additionalProperties": False,
}

STATUS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "swarmnode status",
    "type": "object",
    "required": [
        "schema_version",
        "run_id",
        "queried_at",
        "count",
        "roles",
        "newest_version",
        "tokens_per_s",
        "rollouts_per_s",
        "versions",
        "max_staleness",
        "peers",
        "alerts",
        "reachability",
    ],
    "properties": {
        "schema_version": {"enum": [STATUS_SCHEMA_VERSION]},
        "run_id": {"type": "string"},
        "queried_at": {"type": "number", "minimum": 0},
        "count": _COUNT,
        "roles": {"type": "object", "additionalProperties": _COUNT},
        "newest_version": {"type": "integer", "minimum": -1},
        "tokens_per_s": {"type": "number", "minimum": 0},
        "rollouts_per_s": {"type": "number", "minimum": 0},
        "versions": {"type": "object", "description": "version -> samplers holding it", "additionalProperties": _COUNT},
        "max_staleness": _COUNT,
        "reachability": {"type": "object", "description": "reachability -> live peers", "additionalProperties": _COUNT},
        "builds": {
            "type": "object",
            "description": "swarmnode build (peer records' `software`: 0.2.0) -> peers read, the most common first",
            "additionalProperties": _COUNT,
        },
        "peers": {"type": "array", "items": PEER_SCHEMA},
        "alerts": {"type": "array", "items": ALERT_SCHEMA},
        "card": {
            "type": "object",
            "description": "status <invite>: the run card (run_id, version, owner, model, task, learners, bootstraps)",
        },
        "census": CENSUS_SCHEMA,
        "names_mended": {**_COUNT, "description": "public names shown changed or hidden (markup, control characters)"},
        "board": BOARD_SCHEMA,
        "curves": CURVES_SCHEMA,
        "other_runs": {
            "type": "object",
            "additionalProperties": _COUNT,
            "description": "only when this run has no nodes: other known runs with live nodes here",
        },
    },
    "additionalProperties": False,
}


class SchemaError(SwarmnodeError, ValueError):
    """The document does not fit the schema; the message names the first offending path."""


_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _check(value: Any, schema: dict[str, Any], path: str) -> None:
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_TYPES[t](value) for t in names):
            raise SchemaError(f"{path}: {value!r} is not of type {types}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaError(f"{path}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaError(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                raise SchemaError(f"{path}: missing {key!r}")
        props, extra = schema.get("properties", {}), schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                _check(item, props[key], f"{path}.{key}")
            elif extra is False:
                raise SchemaError(f"{path}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                _check(item, extra, f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(item, schema["items"], f"{path}[{i}]")


def validate(doc: Any, *, builtin: bool = False) -> None:
    """Raise SchemaError if `doc` does not fit STATUS_SCHEMA (`builtin=True` forces the built-in validator)."""
    if not builtin:
        try:
            import jsonschema
        except ImportError:
            builtin = True
        else:
            try:
                jsonschema.validate(doc, STATUS_SCHEMA)
            except jsonschema.ValidationError as exc:
                where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
                raise SchemaError(f"{where}: {exc.message}") from None
            return
    _check(doc, STATUS_SCHEMA, "$")
