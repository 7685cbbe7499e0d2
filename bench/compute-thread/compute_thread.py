"""What running a role's model work on one thread (`swarmnode.compute_thread.ComputeThread`) saves over
`asyncio.to_thread` (the old code path: each call on whichever thread of the default executor is free).

Each trial is a fresh process pinned to one core (`--core`), as a node is: it builds `train-local`'s sampler and
learner for `--config`, then runs `--rounds` rounds of one rollout batch and the learner steps it allows, every
call dispatched from an asyncio loop either way. Trials alternate between the two ways, `--trials` each. Per way:
the median over trials of the first round, of the first `--early` rounds, and of the rest (ms per round), and how
many threads the model work ran on. A new thread's malloc arena has to grow (faulting its pages in) before work
on it runs at full speed, so the difference is largest in a node's first steps.

    python bench/compute-thread/compute_thread.py [--config tiny-digitmap] [--trials 3] [--rounds 30] [--early 5] [--core 0]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import pin, write_results  # noqa: E402  (also puts this checkout's package first)

WAYS = ("to_thread", "compute_thread")


def trial(way: str, config: str, rounds: int) -> dict:
    """One process's rounds (this process: call it in a fresh one); seconds per round and the threads used."""
    import torch

    from swarmnode.allocator import keep_freed_memory
    from swarmnode.compute_thread import ComputeThread
    from swarmnode.config import load_config
    from swarmnode.local.trainer import LocalTrainer

    keep_freed_memory()  # as every swarmnode command does
    torch.set_num_threads(1)
    trainer = LocalTrainer(load_config(config, []), progress=None)
    compute = ComputeThread("bench-compute")
    threads: set[int] = set()

    def tracked(fn):
        def call():
            threads.add(threading.get_ident())
            return fn()

        return call

    async def run(fn):
        return await (compute.run(tracked(fn)) if way == "compute_thread" else asyncio.to_thread(tracked(fn)))

    async def main() -> list[float]:
        times = []
        for _ in range(rounds):
            trainer._deliver()
            began = time.perf_counter()
            await run(trainer.sampler.step)
            while await run(trainer.learner.step) is not None:
                pass
            times.append(time.perf_counter() - began)
        return times

    times = asyncio.run(main())
    compute.close()
    return {"way": way, "round_s": times, "threads": len(threads)}


def summarise(trials: list[dict], early: int) -> dict:
    """Per way: medians over trials of the first round, the first `early` rounds' mean and the rest's mean (ms)."""
    out = {}
    for way in WAYS:
        mine = [t for t in trials if t["way"] == way]
        if not mine:
            continue
        out[way] = {
            "first_round_ms": round(statistics.median(t["round_s"][0] for t in mine) * 1e3, 1),
            "early_round_ms": round(statistics.median(statistics.mean(t["round_s"][:early]) for t in mine) * 1e3, 1),
            "later_round_ms": round(statistics.median(statistics.mean(t["round_s"][early:]) for t in mine) * 1e3, 1),
            "threads": max(t["threads"] for t in mine),
            "trials": len(mine),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny-digitmap")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--early", type=int, default=5, help="the first rounds, reported apart")
    ap.add_argument("--core", type=int, default=0, help="the core every trial is pinned to")
    ap.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md")
    ap.add_argument("--trial", choices=WAYS, help=argparse.SUPPRESS)  # internal: run one trial, print its JSON
    args = ap.parse_args()
    if args.rounds <= args.early:
        ap.error("--rounds must be larger than --early")
    if args.trial:
        print(json.dumps(trial(args.trial, args.config, args.rounds)))
        return
    load = [round(x, 2) for x in os.getloadavg()]
    trials = []
    for i in range(args.trials):
        for way in WAYS:
            cmd = [
                *pin(str(args.core)),
                sys.executable,
                __file__,
                "--trial",
                way,
                "--config",
                args.config,
                "--rounds",
                str(args.rounds),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise SystemExit(f"trial {way} failed:\n{done.stderr[-2000:]}")
            trials.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(
                f"trial {i + 1} {way}: first {trials[-1]['round_s'][0] * 1e3:.0f} ms, {trials[-1]['threads']} threads",
                flush=True,
            )
    summary = summarise(trials, args.early)
    doc = {
        "command": " ".join(["python bench/compute-thread/compute_thread.py", *sys.argv[1:]]),
        "config": args.config,
        "load_before": load,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "early": args.early,
        "summary": summary,
        "trials": trials,
    }
    lines = [
        f"# one compute thread against asyncio.to_thread: `{doc['command']}`",
        "",
        f"load average before {load}, after {doc['load_after']}; one core; ms per round (a rollout batch and "
        f"its learner steps), medians over trials",
        "",
        f"| way | first round | first {args.early} rounds (mean) | later rounds (mean) | threads used | trials |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {way} | {s['first_round_ms']} | {s['early_round_ms']} | {s['later_round_ms']} | {s['threads']} | "
        f"{s['trials']} |"
        for way, s in summary.items()
    ]
    print("\n".join(lines))
    if args.out:
        write_results(args.out, doc, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
