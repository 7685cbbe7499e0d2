"""The configuration reference, generated from the schema: one table per section with every key's type, default
and description (the pydantic `Field(description=...)`). docs/configuration.md holds its output, and
tests/test_config_reference.py keeps the two equal: `python -m swarmnode.config.reference` prints it.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from swarmnode.config.schema import NodeConfig


def _type_name(annotation: Any) -> str:
    """A reader's name for a field's type: `int`, `list of str`, `'a' | 'b'`, `float or none`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        named = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or none" if type(None) in args else "")
    if origin is list:
        return f"list of {_type_name(args[0])}"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.get_default(call_default_factory=True)
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "none"
    if isinstance(value, list):
        return "`[" + ", ".join(str(v) for v in value) + "]`" if value else "`[]`"
    if isinstance(value, str) and (not value.isprintable() or not value):
        return f"`{value!r}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _section_model(field: FieldInfo) -> type[BaseModel] | None:
    """The model of a field that is a section of its own (a pydantic model), else None."""
    annotation = field.annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _section(model: type[BaseModel], prefix: str) -> list[str]:
    """The markdown of one section: its docstring, its keys' table, then its subsections."""
    doc = _cell(model.__doc__ or "")
    lines = [f"## `{prefix.rstrip('.')}`" if prefix else "## top level", ""]
    if doc:
        lines += [doc, ""]
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    subsections: list[tuple[type[BaseModel], str]] = []
    for name, field in model.model_fields.items():
        if (sub_model := _section_model(field)) is not None:
            subsections.append((sub_model, f"{prefix}{name}."))  # listed here, detailed below
            lines.append(f"| `{prefix}{name}` | section | | see below |")
            continue
        lines.append(
            f"| `{prefix}{name}` | {_type_name(field.annotation)} | {_default(field)} | "
            f"{_cell(field.description or '')} |"
        )
    lines.append("")
    for sub, sub_prefix in subsections:
        lines += _section(sub, sub_prefix)
    return lines


def reference_markdown() -> str:
    """Every config key, section by section, as markdown tables."""
    return "\n".join(_section(NodeConfig, "")).rstrip() + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
