"""A sampler's own line of the contributors board, as `status --self` prints it (from its `health.json`)."""

from __future__ import annotations

import time
from typing import Any


def own_line_text(line: Any, now: float | None = None) -> str:
    """`; board: 120 groups trained (9,600 tokens), 2 refused, rank 1 of 3 (read 12 s ago)` ("" without a line)."""
    if not isinstance(line, dict) or not line.get("learners"):
        return ""
    now = time.time() if now is None else now
    ranks = line.get("ranks") or []
    rank = ", ".join(f"rank {r} of {n}" for r, n in ranks) if ranks else "not among the boards' top keys yet"
    refused = f", {line['refused']} refused" if line.get("refused") else ""
    age = max(0.0, now - float(line.get("at") or now))
    return (
        f"; board: {line.get('groups', 0)} groups trained ({line.get('tokens', 0):,} tokens){refused}, {rank} "
        f"(the learners' board of {age:.0f} s ago)"
    )
