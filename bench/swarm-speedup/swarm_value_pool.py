"""Pool several `bench/swarm-speedup/swarm_value.py` runs: each run's speed-ups and the pooled ones, read the bench's three ways.

Each repeat's time to the target is read again off its held-out curve against its own run's target (runs differ a
little in start and target), with the bench's `first_time_at`; a repeat that never reached it counts as infinitely
late (the bench's `_median`). The pooled speed-up of an arm is the baseline's median over every pooled repeat
divided by the arm's. Runs without the arm (or the baseline) are left out of its figures.

How far the pooled figure can be trusted: a 90 % interval from resampling whole runs with replacement (`--draws`
times, seeded). Runs, not repeats, are the unit: the repeats of one run share that run's machine state (how much
the vCPUs slow each other at the time), which is what moves the figure most. `--goal X` also counts the runs whose
own speed-up reaches X.

`--after-first-step` counts each repeat's time from its own first learner step instead of from its launch: start-up
(imports, model load, the swarm learner's DHT join) left out, as it is from a run long enough to make it negligible.
A second reading, not the goal's: the bench's figure counts from launch.

    python bench/swarm-speedup/swarm_value_pool.py bench/swarm-speedup/results/swarm_value_digitmap_s1*.json [--arm warm-pull]
        [--baseline local] [--also local-busy] [--goal 1.5] [--draws 2000] [--after-first-step]
        [--out bench/swarm-speedup/results/swarm_value_pool]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # this study, bench/

from swarm_value import ESTIMATORS, _median, first_time_at  # noqa: E402

from benchlib import write_results  # noqa: E402

Times = list[float | None]  # each repeat's time to the target (None: never reached)


def run_times(doc: dict, arm: str, after_first_step: bool = False) -> dict[str, Times]:
    """Per reading (the ESTIMATORS' suffixes), the time each repeat of `arm` first reached its run's target: from
    its launch, or with `after_first_step` from its first learner step (`first_step_s`)."""
    reps = doc["arms"].get(arm, [])

    def since(r: dict, t: float | None) -> float | None:
        if t is None or not after_first_step:
            return t
        return round(t - r["first_step_s"], 3)

    return {
        name: [since(r, first_time_at(r["heldout"], doc["target"], **how)) for r in reps]
        for name, (how, _) in ESTIMATORS.items()
    }


def speedup(base: Times, arm: Times) -> float | None:
    """The baseline's median time to the target over the arm's (None when either median is not reached)."""
    b, a = _median(base), _median(arm)
    return round(b / a, 3) if b and a else None


def run_interval(per_run: list[tuple[Times, Times]], draws: int, seed: int = 0) -> list[float] | None:
    """A 90 % interval [5th, 95th percentile] of the pooled speed-up over `draws` resamplings of whole runs (each
    run's (baseline's, arm's) times); None with fewer than 2 runs. A draw in which an arm's median never reaches
    the target counts that arm as infinitely slow."""
    if len(per_run) < 2 or draws <= 0:
        return None
    rng = random.Random(seed)
    ups = []
    for _ in range(draws):
        base: Times = []
        arm: Times = []
        for b, a in rng.choices(per_run, k=len(per_run)):
            base += b
            arm += a
        b_med, a_med = _median(base) or float("inf"), _median(arm) or float("inf")
        if a_med != float("inf") or b_med != float("inf"):  # both never reached: no reading
            ups.append(b_med / a_med)
    if not ups:
        return None
    ups.sort()
    return [round(ups[int(0.05 * (len(ups) - 1))], 3), round(ups[int(0.95 * (len(ups) - 1))], 3)]


def pool(
    docs: dict[str, dict],
    arm: str,
    baselines: list[str],
    draws: int = 0,
    goal: float | None = None,
    after_first_step: bool = False,
) -> dict:
    """Per run and pooled: `arm`'s speed-up over each of `baselines`, per reading, with the repeat counts. Each
    comparison pools only the runs that have both arms (in the same run, the same machine state). With `draws`,
    each pooled reading also gets its run-resampled 90 % interval (`interval`); with `goal`, the number of runs
    whose own speed-up reaches it (`runs_at_goal`) out of `runs`; with `after_first_step`, times count from each
    repeat's first step (`run_times`)."""
    out: dict = {"arm": arm, "runs": {}, "pooled": {}}
    per_run: dict[str, dict[str, list[tuple[Times, Times]]]] = {b: {name: [] for name in ESTIMATORS} for b in baselines}
    for label, doc in docs.items():
        if doc.get("target") is None or arm not in doc["arms"]:
            continue
        mine = run_times(doc, arm, after_first_step)
        out["runs"][label] = {}
        for b in (b for b in baselines if b in doc["arms"]):
            theirs = run_times(doc, b, after_first_step)
            out["runs"][label][b] = {name: speedup(theirs[name], mine[name]) for name in ESTIMATORS}
            for name in ESTIMATORS:
                per_run[b][name].append((theirs[name], mine[name]))
    for b in baselines:
        runs = per_run[b]
        if not runs[""]:
            continue
        joined = {
            name: ([t for pair in runs[name] for t in pair[0]], [t for pair in runs[name] for t in pair[1]])
            for name in ESTIMATORS
        }
        figures = out["pooled"][b] = {name: speedup(*joined[name]) for name in ESTIMATORS}
        figures["repeats"] = [len(joined[""][0]), len(joined[""][1])]
        figures["runs"] = len(runs[""])
        if draws:
            figures["interval"] = {name: run_interval(runs[name], draws) for name in ESTIMATORS}
        if goal is not None:
            figures["runs_at_goal"] = {
                name: sum(1 for pair in runs[name] if (speedup(*pair) or 0.0) >= goal) for name in ESTIMATORS
            }
    return out


def markdown(result: dict, command: str) -> str:
    names = list(ESTIMATORS)
    heads = " / ".join(n.strip("_") or "first" for n in names)
    since = "each repeat's first step" if result.get("after_first_step") else "launch"
    lines = [
        f"# swarm value, pooled: `{command}`",
        "",
        f"speed-up of {result['arm']} to the held-out target ({heads}; times from {since}), per run and pooled",
        "",
        "| run | over | speed-up |",
        "|---|---|---|",
    ]
    for label, per in result["runs"].items():
        for base, ups in per.items():
            lines.append(f"| {label} | {base} | " + " / ".join(f"{ups[n]}" for n in names) + " |")
    for base, ups in result["pooled"].items():
        lines.append(
            f"| **pooled** ({ups['runs']} runs, {ups['repeats'][0]} / {ups['repeats'][1]} repeats) | {base} | "
            + " / ".join(f"**{ups[n]}**" for n in names)
            + " |"
        )
        if "interval" in ups:
            lines.append(
                f"| 90 % interval, runs resampled ({result['draws']} draws) | {base} | "
                + " / ".join("-" if ups["interval"][n] is None else "{}-{}".format(*ups["interval"][n]) for n in names)
                + " |"
            )
        if "runs_at_goal" in ups:
            lines.append(
                f"| runs at {result['goal']}x or more | {base} | "
                + " / ".join(f"{ups['runs_at_goal'][n]} of {ups['runs']}" for n in names)
                + " |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="swarm_value results documents (.json)")
    ap.add_argument("--arm", default="warm-pull")
    ap.add_argument("--baseline", default="local")
    ap.add_argument("--also", action="append", default=[], help="another arm to compare against (repeatable)")
    ap.add_argument("--goal", type=float, default=None, help="count the runs whose own speed-up reaches this")
    ap.add_argument("--draws", type=int, default=2000, help="run resamplings for the 90 %% interval (0: none)")
    ap.add_argument(
        "--after-first-step",
        action="store_true",
        help="count each repeat's time from its first learner step, not from its launch",
    )
    ap.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md")
    args = ap.parse_args()
    docs = {}
    for path in args.results:
        try:
            docs[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            sys.exit(f"{path}: cannot read a results document ({exc})")
    if args.draws < 0 or (args.goal is not None and args.goal <= 0):
        sys.exit("--draws must be 0 or more and --goal above 0")
    if args.after_first_step:
        for label, doc in docs.items():
            if any(
                r.get("first_step_s") is None and r.get("steps") for reps in doc.get("arms", {}).values() for r in reps
            ):
                sys.exit(f"{label}: a repeat has no `first_step_s`; --after-first-step needs a newer results document")
    result = {
        **pool(docs, args.arm, [args.baseline, *args.also], args.draws, args.goal, args.after_first_step),
        "draws": args.draws,
        "goal": args.goal,
        "after_first_step": args.after_first_step,
    }
    command = " ".join(["python bench/swarm-speedup/swarm_value_pool.py", *sys.argv[1:]])
    text = markdown(result, command)
    print(text)
    write_results(args.out, {"command": command, **result}, text)


if __name__ == "__main__":
    main()
