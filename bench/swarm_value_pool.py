"""Pool several `bench/swarm_value.py` runs: each run's speed-ups and the pooled ones, read the bench's three ways.

Each repeat's time to the target is read again off its held-out curve against its own run's target (runs differ a
little in start and target), with the bench's `first_time_at`; a repeat that never reached it counts as infinitely
late (the bench's `_median`). The pooled speed-up of an arm is the baseline's median over every pooled repeat
divided by the arm's. Runs without the arm (or the baseline) are left out of its figures.

    python bench/swarm_value_pool.py bench/results/swarm_value_digitmap_s1*.json [--arm warm-pull]
        [--baseline local] [--also local-busy] [--out bench/results/swarm_value_pool]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_files import write_results  # noqa: E402  (bench/, the script's own folder)
from swarm_value import ESTIMATORS, _median, first_time_at  # noqa: E402


def run_times(doc: dict, arm: str) -> dict[str, list[float | None]]:
    """Per reading (the ESTIMATORS' suffixes), the time each repeat of `arm` first reached its run's target."""
    reps = doc["arms"].get(arm, [])
    return {name: [first_time_at(r["heldout"], doc["target"], **how) for r in reps]
            for name, (how, _) in ESTIMATORS.items()}


def speedup(base: list[float | None], arm: list[float | None]) -> float | None:
    """The baseline's median time to the target over the arm's (None when either median is not reached)."""
    b, a = _median(base), _median(arm)
    return round(b / a, 3) if b and a else None


def pool(docs: dict[str, dict], arm: str, baselines: list[str]) -> dict:
    """Per run and pooled: `arm`'s speed-up over each of `baselines`, per reading, with the repeat counts. Each
    comparison pools only the runs that have both arms (in the same run, the same machine state)."""
    out: dict = {"arm": arm, "runs": {}, "pooled": {}}
    pooled = {b: {name: ([], []) for name in ESTIMATORS} for b in baselines}  # (baseline's, arm's) times
    for label, doc in docs.items():
        if doc.get("target") is None or arm not in doc["arms"]:
            continue
        mine = run_times(doc, arm)
        out["runs"][label] = {}
        for b in (b for b in baselines if b in doc["arms"]):
            theirs = run_times(doc, b)
            out["runs"][label][b] = {name: speedup(theirs[name], mine[name]) for name in ESTIMATORS}
            for name in ESTIMATORS:
                pooled[b][name][0].extend(theirs[name])
                pooled[b][name][1].extend(mine[name])
    for b in baselines:
        if pooled[b][""][0]:
            out["pooled"][b] = {name: speedup(*pooled[b][name]) for name in ESTIMATORS}
            out["pooled"][b]["repeats"] = [len(pooled[b][""][0]), len(pooled[b][""][1])]
    return out


def markdown(result: dict, command: str) -> str:
    names = list(ESTIMATORS)
    heads = " / ".join(n.strip("_") or "first" for n in names)
    lines = [f"# swarm value, pooled: `{command}`", "",
             f"speed-up of {result['arm']} to the held-out target ({heads}), per run and pooled", "",
             "| run | over | speed-up |", "|---|---|---|"]
    for label, per in result["runs"].items():
        for base, ups in per.items():
            lines.append(f"| {label} | {base} | " + " / ".join(f"{ups[n]}" for n in names) + " |")
    for base, ups in result["pooled"].items():
        lines.append(f"| **pooled** ({ups['repeats'][0]} / {ups['repeats'][1]} repeats) | {base} | "
                     + " / ".join(f"**{ups[n]}**" for n in names) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="swarm_value results documents (.json)")
    ap.add_argument("--arm", default="warm-pull")
    ap.add_argument("--baseline", default="local")
    ap.add_argument("--also", action="append", default=[], help="another arm to compare against (repeatable)")
    ap.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md")
    args = ap.parse_args()
    docs = {}
    for path in args.results:
        try:
            docs[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            sys.exit(f"{path}: cannot read a results document ({exc})")
    result = pool(docs, args.arm, [args.baseline, *args.also])
    command = " ".join(["python bench/swarm_value_pool.py", *sys.argv[1:]])
    text = markdown(result, command)
    print(text)
    write_results(args.out, {"command": command, **result}, text)


if __name__ == "__main__":
    main()
