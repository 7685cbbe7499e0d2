"""Writing a bench's results: `<out>.json` (the whole document) and `<out>.md` (its tables)."""

from __future__ import annotations

import json
from pathlib import Path


def write_results(out: Path | None, doc: dict, text: str) -> None:
    """Write `doc` to `<out>.json` and `text` to `<out>.md` (folders made); nothing when `out` is None."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    out.with_suffix(".md").write_text(text)
