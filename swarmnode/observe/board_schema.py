"""The JSON schema of the status document's `board` and `curves` (`swarmnode.observe.board_view` builds them)."""

from __future__ import annotations

from typing import Any

from swarmnode.board.curves import METRICS

_COUNT = {"type": "integer", "minimum": 0}
_TIME = {"type": "number", "minimum": 0}
_REASONS = {"type": "object", "additionalProperties": _COUNT, "description": "groups refused, by reason"}

BOARD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "the contributors board: what the believed learners trained per sampler key over the run",
    "required": ["learners", "entries", "rest", "refused_boards"],
    "properties": {
        "learners": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["peer_id", "at", "samplers", "groups", "tokens", "refused"],
                "properties": {
                    "peer_id": {"type": "string"},
                    "at": _TIME,
                    "samplers": _COUNT,
                    "groups": _COUNT,
                    "tokens": _COUNT,
                    "refused": _COUNT,
                },
                "additionalProperties": False,
            },
        },
        "entries": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["peer_id", "name", "groups", "tokens", "first", "last", "refused"],
                "properties": {
                    "peer_id": {"type": "string"},
                    "name": {"type": "string", "description": "its public name as shown (mended), or empty"},
                    "groups": _COUNT,
                    "tokens": _COUNT,
                    "first": _TIME,
                    "last": _TIME,
                    "refused": _REASONS,
                },
                "additionalProperties": False,
            },
        },
        "rest": {
            "type": "object",
            "required": ["samplers", "groups", "tokens", "refused"],
            "properties": {"samplers": _COUNT, "groups": _COUNT, "tokens": _COUNT, "refused": _COUNT},
            "additionalProperties": False,
        },
        "refused_boards": {**_COUNT, "description": "boards of keys the reader does not believe are learners"},
    },
    "additionalProperties": False,
}

_SERIES = {"type": "array", "items": {"type": ["number", "null"]}}
CURVES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "learner peer id -> its curves over the run (at most 128 points, each the mean of `span` steps)",
    "additionalProperties": {
        "type": "object",
        "required": ["at", "span", "step", *METRICS],
        "properties": {
            "at": _TIME,
            "span": {"type": "integer", "minimum": 1},
            "step": {"type": "array", "items": _COUNT},
            **{m: _SERIES for m in METRICS},
        },
        "additionalProperties": False,
    },
}
