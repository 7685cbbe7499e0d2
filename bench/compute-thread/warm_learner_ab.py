"""A learner joining a warm swarm, two source trees alternating: does the new code path start and step faster?

Each tree (a checkout of the repository, e.g. `git worktree add /tmp/old <rev>`) runs, in a subprocess that imports
`swarmnode` and `bench/swarm-speedup/swarm_value.py` from that tree, `swarm_value.run_swarm(..., warm=True)`: the bootstrap and
`--samplers` samplers on core 1, started and ready first, then the learner on core 0 for `--seconds` from its launch
(`--config`, with `sample_when_idle` and pull mode, as the swarm bench's warm-pull arm). Trees alternate for
`--pairs` pairs so machine load hits both alike. Per run: the learner's first step (seconds since its launch),
steps/s after it, and when it reached steps 10 and 50; per tree the medians, and the ratios new/old.

    python bench/compute-thread/warm_learner_ab.py --old /tmp/old [--new .] [--pairs 3] [--seconds 25] [--config tiny-digitmap]
        [--samplers 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT, write_results  # noqa: E402  (also puts this checkout's package first)

ARM_SETS = [
    "learner.checkpoint_every=5",
    "learner.sample_when_idle=true",
    "sync.mode=pull",
    "sampler.max_groups_per_second=0",
]
FIGURES = ("first_step_s", "steps_per_s_after_first", "step10_s", "step50_s")


def inner(tree: Path, seconds: float, config: str, samplers: int) -> None:
    """Runs with `tree`'s swarmnode and bench first on sys.path: one warm run; prints its figures as JSON."""
    sys.path[:0] = [str(tree / "bench" / "swarm-speedup"), str(tree / "bench"), str(tree)]  # either bench layout
    import swarm_value

    with tempfile.TemporaryDirectory(prefix="warm-ab-") as work:
        res = swarm_value.run_swarm(seconds, config, ARM_SETS, Path(work), None, samplers=samplers, warm=True)
    curve, t0 = res["curve"], res["t0"]
    if len(curve) < 2:
        raise SystemExit(f"{tree}: the learner made {len(curve)} steps in {seconds} s")

    def at(step: int) -> float | None:
        return round(curve[step - 1]["time"] - t0, 2) if len(curve) >= step else None

    print(
        json.dumps(
            {
                "first_step_s": at(1),
                "step10_s": at(10),
                "step50_s": at(50),
                "steps_per_s_after_first": round((len(curve) - 1) / (curve[-1]["time"] - curve[0]["time"]), 3),
            }
        )
    )


def run_tree(tree: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the nodes it starts import this tree's swarmnode too
    cmd = [
        sys.executable,
        __file__,
        "--inner",
        str(tree),
        "--seconds",
        str(args.seconds),
        "--config",
        args.config,
        "--samplers",
        str(args.samplers),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.seconds + 600)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: the run failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Per tree the median of each figure; and new/old for each."""
    med = {
        tree: {
            k: statistics.median(r[k] for r in rs if r[k] is not None) if any(r[k] is not None for r in rs) else None
            for k in FIGURES
        }
        for tree, rs in runs.items()
    }
    ratio = {k: round(med["new"][k] / med["old"][k], 3) if med["new"][k] and med["old"][k] else None for k in FIGURES}
    return {"median": med, "new_over_old": ratio}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, help="the baseline tree")
    ap.add_argument("--new", type=Path, default=ROOT)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--config", default="tiny-digitmap")
    ap.add_argument("--samplers", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md")
    ap.add_argument("--inner", type=Path, help=argparse.SUPPRESS)  # internal: one run in this tree
    args = ap.parse_args()
    if args.inner:
        inner(args.inner.resolve(), args.seconds, args.config, args.samplers)
        return
    if args.old is None:
        ap.error("--old is required (a checkout of the baseline revision)")
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    for name, tree in trees.items():
        if not any((tree / "bench" / d / "swarm_value.py").is_file() for d in ("swarm-speedup", ".")):
            ap.error(f"--{name} {tree}: not a swarmnode checkout with bench/swarm-speedup/swarm_value.py")
    load = [round(x, 2) for x in os.getloadavg()]
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for i in range(args.pairs):
        for name, tree in trees.items():
            runs[name].append(run_tree(tree, args))
            print(f"pair {i + 1} {name}: {runs[name][-1]}", flush=True)
    summary = summarise(runs)
    doc = {
        "command": " ".join(["python bench/compute-thread/warm_learner_ab.py", *sys.argv[1:]]),
        "trees": {k: str(v) for k, v in trees.items()},
        "load_before": load,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
        **summary,
    }
    lines = [
        f"# warm learner, old vs new tree: `{doc['command']}`",
        "",
        f"load average before {load}, after {doc['load_after']}; {args.pairs} alternating pairs, "
        f"{args.seconds:g} s each from the learner's launch; medians",
        "",
        "| tree | 1st step (s) | steps/s after it | step 10 (s) | step 50 (s) |",
        "|---|---|---|---|---|",
    ]
    for name in ("old", "new", "new_over_old"):
        fig = summary["median"].get(name) if name != "new_over_old" else summary["new_over_old"]
        lines.append(f"| {name.replace('_', ' ')} | " + " | ".join(str(fig[k]) for k in FIGURES) + " |")
    lines.append("")
    lines += [
        f"- {name} runs: " + "; ".join(" / ".join(str(r[k]) for k in FIGURES) for r in rs) for name, rs in runs.items()
    ]
    text = "\n".join(lines)
    print(text)
    write_results(args.out, doc, text + "\n")


if __name__ == "__main__":
    main()
