"""Generation with glibc's default heap thresholds against `swarmnode.allocator.keep_freed_memory()`.

Each arm is a fresh child process pinned to one core (`taskset -c --core`) that loads the config's model with the
sampler's engine, generates one batch to warm up, then times `--batches` batches (the sampler's batch: prompts per
batch x G completions) and counts the minor page faults they caused. The arms alternate, `--repeats` times, in
one run; the ratio is default / tuned.

    python bench/allocator-faults/allocator_faults.py --config tiny-digitmap --repeats 3 --out bench/allocator-faults/results/allocator_faults
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT, config_args, pin  # noqa: E402  (also puts this checkout's package first)

CHILD = """
import json, random, resource, sys, time
from swarmnode.allocator import keep_freed_memory
from swarmnode.config import load_config
from swarmnode.sampler.build import build_engine
from swarmnode.tasks.registry import build_task
config, sets, batches, tuned = json.loads(sys.argv[1])
if tuned:
    assert keep_freed_memory(), "glibc did not take the settings"
cfg = load_config(config, sets)
engine, task = build_engine(cfg), build_task(cfg.task)
prompts = [p.text for p in task.sample(cfg.sampler.prompts_per_batch, random.Random(0))]
s = cfg.sampler
generate = lambda: engine.generate(prompts, s.num_generations, s.temperature, s.max_completion_length)
generate()
faults, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
for _ in range(batches):
    generate()
print(json.dumps({"ms_per_batch": (time.perf_counter() - start) / batches * 1e3,
                  "faults_per_batch": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / batches}))
"""


def run_arm(config: str, sets: list[str], batches: int, tuned: bool, core: str) -> dict:
    """One child process: its ms and minor page faults per generated batch."""
    args = json.dumps([config, sets, batches, tuned])
    out = subprocess.run(
        [*pin(core), sys.executable, "-c", CHILD, args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config_args(ap, "tiny-digitmap")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--core", default="1")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for repeat in range(1, args.repeats + 1):
        for tuned in (False, True):
            row = {
                "arm": "keep_freed_memory" if tuned else "glibc defaults",
                "repeat": repeat,
                **run_arm(args.config, args.sets, args.batches, tuned, args.core),
            }
            rows.append(row)
            print(
                f"{row['arm']:>17} {repeat}: {row['ms_per_batch']:.1f} ms/batch, "
                f"{row['faults_per_batch']:,.0f} minor faults/batch",
                flush=True,
            )
    median = {
        arm: statistics.median(r["ms_per_batch"] for r in rows if r["arm"] == arm)
        for arm in ("glibc defaults", "keep_freed_memory")
    }
    ratio = round(median["glibc defaults"] / median["keep_freed_memory"], 3)
    print(f"median ms/batch {median}; default / tuned = {ratio}")
    if args.out:
        command = "python bench/allocator-faults/allocator_faults.py " + " ".join(sys.argv[1:])
        load = os.getloadavg()
        doc = {
            "command": command,
            "config": args.config,
            "sets": args.sets,
            "load_after": load,
            "rows": rows,
            "median_ms_per_batch": median,
            "speedup": ratio,
        }
        args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
        lines = [
            f"# glibc heap thresholds and generation: `{command}`",
            "",
            f"load average after (1/5/15 min): {[round(x, 2) for x in load]}",
            "",
            "| arm | repeat | ms per batch | minor page faults per batch |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r['arm']} | {r['repeat']} | {r['ms_per_batch']:.1f} | {r['faults_per_batch']:,.0f} |" for r in rows
        ]
        lines += ["", f"median ms per batch: {median}; default / tuned: **{ratio}x**"]
        args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
