"""The generated tables of docs/status-and-metrics.md, derived from the health records: the `health` keys a peer
record carries and the Prometheus families (`python -m swarmnode.observe.health_tables` prints them;
tests/test_health_record.py keeps the document equal to them).
"""

from __future__ import annotations

from typing import Any

from swarmnode.observe.health_fields import FIELDS, WIRE_FIELDS, FieldSpec, type_schema
from swarmnode.observe.health_record import ROLE_RECORDS


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a table cell's own bars


def _nodes(spec: FieldSpec) -> str:
    return "all" if len(spec.roles) == len(ROLE_RECORDS) else ", ".join(spec.roles)


def metrics_table() -> str:
    """The Metrics table (docs/status-and-metrics.md): one row per Prometheus family, derived from the records."""
    rows = ["| metric | type | health key | nodes | meaning |", "|---|---|---|---|---|"]
    for spec in FIELDS.values():
        if spec.metric is None:
            continue
        name = spec.metric + ("_total" if spec.kind == "counter" else "") + (f"{{{spec.label}}}" if spec.label else "")
        rows.append(f"| `{name}` | {spec.kind} | `{spec.name}` | {_nodes(spec)} | {_cell(spec.help)} |")
    return "\n".join(rows)


def health_table() -> str:
    """The table of the `health` keys a peer record carries (status JSON; docs/status-and-metrics.md), derived from
    the records."""
    rows = ["| key | type | nodes | meaning |", "|---|---|---|---|"]
    for spec in WIRE_FIELDS.values():
        shape = type_schema(spec.type)
        kind = f"array of {_item_name(shape['items'])}" if shape["type"] == "array" else shape["type"]
        rows.append(f"| `{spec.name}` | {kind} | {_nodes(spec)} | {_cell(spec.help)} |")
    return "\n".join(rows)


def _item_name(schema: dict[str, Any]) -> str:
    tp = schema["type"]
    return " or ".join(tp) if isinstance(tp, list) else tp


def markdown_tables() -> dict[str, str]:
    """The generated tables of docs/status-and-metrics.md by name (`python -m swarmnode.observe.health_record` prints them)."""
    return {"health": health_table(), "metrics": metrics_table()}


if __name__ == "__main__":
    for name, table in markdown_tables().items():
        print(f"<!-- {name} table -->\n{table}\n")
