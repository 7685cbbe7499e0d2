"""The scale page's results table from lab result files: one row per size measured.

python bench/scale/table.py bench/scale/results/quiet.json --label "k = 20" [more.json --label ...]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

HEADER = (
    "| DHT | samplers (working) | median KB/min | busiest KB/min | learner KB/min | bootstrap KB/min | "
    "median calls/min | spread s p50 / p95 / p100 | learner copies/version | steps/s | busy | waste | "
    "ack p99 s | acked/10 min per sampler (min-max; none) | status snapshot | wave ready s (max) | "
    "bootstrap cores, RSS, conns | load |"
)


def _n(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-" if value is None else "never"
    return f"{value:,.{digits}f}"


def row(doc: dict, label: str) -> str:
    """One size's row of the table."""
    ctl, calls = doc.get("control_bytes_per_min", {}), doc.get("control_calls_per_min") or {}
    spread, learner = doc.get("spread", {}), doc.get("learner", {})
    acked, status = doc.get("per_sampler_acked_per_10min") or {}, doc.get("status") or {}
    boot, wave = doc.get("bootstrap") or {}, doc.get("join_wave") or {}
    kb = {k: _n(ctl.get(k) and ctl[k] / 1e3) for k in ("median_sampler", "busiest_node", "learner", "bootstrap")}
    cells = [
        label,
        f"{doc['samplers']} ({doc.get('samplers_working', doc['samplers'])})",
        kb["median_sampler"],
        kb["busiest_node"],
        kb["learner"],
        kb["bootstrap"],
        _n(calls.get("median_sampler")),
        " / ".join(_n(spread.get(k), 1) for k in ("p50_s", "p95_s", "p100_s")),
        _n(learner.get("upload_copies_per_version"), 2),
        _n(learner.get("steps_per_s"), 2),
        _n(learner.get("busy_fraction"), 2),
        _n(learner.get("waste_fraction"), 2),
        _n(doc.get("ack_p99_s"), 1),
        f"{_n(acked.get('min'))}-{_n(acked.get('max'))}; {acked.get('none', '-')}",
        (
            f"{_n(status.get('read_s'), 1)} s, {_n(status.get('bytes_in', 0) / 1e3)} KB ({status.get('peers')} peers)"
            if status
            else "-"
        ),
        _n(wave.get("ready_s_max")),
        f"{_n(boot.get('cpu_cores'), 3)}, {_n(boot.get('rss_mb'))} MB, {boot.get('connections', '-')}",
        f"{_n(doc.get('load_start'))}-{_n(doc.get('load_end'))}",
    ]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+")
    ap.add_argument("--label", action="append", default=[])
    args = ap.parse_args()
    labels = args.label + [p.stem for p in args.results[len(args.label) :]]
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|")
    for path, label in zip(args.results, labels):
        for doc in json.loads(path.read_text()):
            print(row(doc, label))


if __name__ == "__main__":
    main()
