"""Dashboard refresh cost with a large simulated swarm (no network).

Each refresh = decode N signed PeerRecords (as they come out of the DHT) -> status document (summary, alerts)
-> `build_view` -> render to a 160x50 Console writing into a StringIO. The baseline, measured in the same run on
the same records, is what `swarmnode status` (plain text) does: decode -> status document -> `format_status`.

    python bench/dashboard-refresh/dashboard_refresh.py            # 50 peers, 200 refreshes
    python bench/dashboard-refresh/dashboard_refresh.py --peers 200 --repeats 100
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from health_fixtures import simulated_records  # noqa: E402
from rich.console import Console  # noqa: E402

from swarmnode.config import load_config  # noqa: E402
from swarmnode.observe.dashboard_view import History, build_view  # noqa: E402
from swarmnode.observe.status import format_status, status_document  # noqa: E402
from swarmnode.protocol.peer import PeerRecord  # noqa: E402


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()

    cfg = load_config("tiny-cpu", ["run_id=bench-run"])
    # a swarm with something to show: stale samplers, an offender, a collapsing learner
    records = simulated_records(
        args.peers, learners=2, lags=[20, 0, 1], invalid_peers=["12D3KooWbench"], rewards=[0.6] * 20 + [0.1] * 12
    )
    payloads = [r.encode() for r in records]
    history = History()

    def read() -> dict:
        return status_document(cfg, [PeerRecord.decode(p) for p in payloads])

    def dashboard_refresh() -> None:
        doc = read()
        history.add(doc)
        console = Console(width=160, height=50, file=io.StringIO(), force_terminal=True, color_system="truecolor")
        console.print(build_view(doc, history, max_rows=max(5, console.height - 28)))

    def status_text() -> None:
        format_status(read())

    for fn in (dashboard_refresh, status_text):  # warm up (imports, caches)
        fn()
    decode = timed(read, args.repeats)
    dash = timed(dashboard_refresh, args.repeats)
    base = timed(status_text, args.repeats)
    med = {k: statistics.median(v) * 1e3 for k, v in (("decode", decode), ("dash", dash), ("base", base))}
    p95 = sorted(dash)[int(0.95 * len(dash)) - 1] * 1e3
    record_bytes = max(len(p) for p in payloads)
    print(f"peers {args.peers}, refreshes {args.repeats}, largest record {record_bytes} bytes")
    print(f"decode + status document: {med['decode']:.2f} ms (median)")
    print(
        f"dashboard refresh (decode + document + build_view + render 160x50): {med['dash']:.2f} ms median, "
        f"{p95:.2f} ms p95"
    )
    print(f"baseline `status` text (decode + document + format_status): {med['base']:.2f} ms median")
    print(
        f"ratio dashboard / status text: {med['dash'] / med['base']:.1f}x; "
        f"share of a 3 s refresh interval: {med['dash'] / 3000:.2%}"
    )


if __name__ == "__main__":
    main()
