"""bench/README.md's index cannot drift from the pages: every study folder has a row linking its page, and every
figure a row's one-line answer gives appears in that page's answer."""

from __future__ import annotations

import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
ROW = re.compile(r"^\| \[(?P<study>[^\]]+)\]\((?P<link>[^)]+)\) \| (?P<question>[^|]+) \| (?P<answer>.+) \|$")
ANSWER_START = re.compile(r"^(\*\*Answer\b|## Answer\b)")
ANSWER_END = re.compile(r"^(\*\*(Command|Machine|Date|Setup)\b|## )")
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def index_rows() -> dict[str, dict[str, str]]:
    """bench/README.md's table rows by study."""
    rows = {}
    for line in (BENCH / "README.md").read_text().splitlines():
        if (m := ROW.match(line)) is not None:
            rows[m["study"]] = m.groupdict()
    return rows


def page_answer(page: Path) -> str:
    """The answer of a study's page: from its `**Answer` (or `## Answer`) to its command, machine or date."""
    lines = page.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if ANSWER_START.match(line)), None)
    assert start is not None, f"{page}: no **Answer** paragraph or ## Answer section"
    end = next((i for i in range(start + 1, len(lines)) if ANSWER_END.match(lines[i])), len(lines))
    return "\n".join(lines[start:end])


def figures(text: str) -> set[str]:
    """The numbers a text gives, thousands separators dropped (`10,097` -> `10097`)."""
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def test_every_study_has_a_row_that_links_its_page():
    studies = {p.parent.name for p in BENCH.glob("*/README.md") if p.parent.name != "benchlib"}
    rows = index_rows()
    assert sorted(studies - set(rows)) == [], "studies without a row in bench/README.md"
    assert sorted(set(rows) - studies) == [], "rows without a study folder"
    for study, row in rows.items():
        assert row["link"] == f"{study}/README.md", row


def test_every_figure_of_a_row_is_in_its_pages_answer():
    drift = {}
    for study, row in index_rows().items():
        missing = figures(row["answer"]) - figures(page_answer(BENCH / study / "README.md"))
        if missing:
            drift[study] = sorted(missing)
    assert drift == {}, "figures in bench/README.md's answers that the pages' answers do not give"
