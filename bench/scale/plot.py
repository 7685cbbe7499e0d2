"""The growth curves of scale-lab runs as one PNG (needs matplotlib).

    python bench/scale/plot.py bench/scale/results/before.json bench/scale/results/after.json \
        --labels "one peers key" "sharded" --out bench/scale/curves.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from model import calls_per_min  # bench/scale/model.py (this script's directory is on sys.path)

PANELS = [
    ("control bytes/min, median sampler", lambda d: d["control_bytes_per_min"]["median_sampler"]),
    (
        "control bytes per DHT call: median bytes / median calls (not load-bound)",
        lambda d: (
            d["control_bytes_per_min"]["median_sampler"] / calls
            if (calls := calls_per_min(d, "median_sampler"))
            else None
        ),
    ),
    ("control bytes/min, bootstrap", lambda d: d["control_bytes_per_min"]["bootstrap"]),
    ("version spread p95, s", lambda d: d["spread"].get("p95_s")),
    ("learner upload, copies/version", lambda d: (d.get("learner") or {}).get("upload_copies_per_version")),
    ("status snapshot, s", lambda d: (d.get("status") or {}).get("read_s")),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+")
    ap.add_argument("--labels", nargs="+")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("curves.png"))
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for path, label in zip(args.results, args.labels or [p.stem for p in args.results]):
        docs = json.loads(path.read_text())
        for ax, (title, get) in zip(axes.flat, PANELS):
            pts = sorted(
                (d.get("samplers_working", d["samplers"]) + 2, get(d))
                for d in docs
                if get(d) is not None and get(d) != float("inf")
            )
            if pts:
                ax.plot(*zip(*pts), marker="o", label=label)
            ax.set_title(title, fontsize=10)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("nodes (samplers + learner + bootstrap)")
            ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
