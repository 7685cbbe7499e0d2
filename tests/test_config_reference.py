"""docs/configuration.md carries the reference generated from the schema's field descriptions, and every key has one."""

from __future__ import annotations

from pathlib import Path

from swarmnode.config.reference import reference_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_the_documented_reference_is_the_generated_one():
    assert reference_markdown() in DOC.read_text(), (
        "docs/configuration.md differs from the schema: replace its generated part with "
        "`python -m swarmnode.config.reference`"
    )


def test_every_key_has_a_type_default_and_meaning():
    rows = [line for line in reference_markdown().splitlines() if line.startswith("| `")]
    assert len(rows) > 80
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[1], row
        if cells[1] != "section":
            assert cells[2], row
