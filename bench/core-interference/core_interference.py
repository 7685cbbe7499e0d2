"""How much a busy second core slows the first: the same work on core 0 with core 1 idle and with core 1 busy.

On a small VM the two vCPUs can be SMT siblings of one physical core, or share caches and memory bandwidth with
each other (and with the host's other guests). The swarm bench (`bench/swarm-speedup/swarm_value.py`) keeps both cores busy
(learner on one, samplers on the other) while `train-local` runs with the other core idle, so this slowdown is
paid by the swarm alone. Work, timed on core 0 in this process (median of `--batches` per round, rounds
alternating idle/busy): one rollout batch of the config (`generate`) and one learner step on it (`train`). The
neighbour on core 1 is `bench/benchlib/neighbour_load.py` (the same rollout batches, forever). `--cores` picks two other cores.

    python bench/core-interference/core_interference.py [--config tiny-digitmap] [--rounds 3] [--batches 6] [--cores 0,1] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from local_phases import timed_round  # noqa: E402

from benchlib import core_pair, write_results  # noqa: E402  (also puts this checkout's package first)
from benchlib.neighbour_load import start_neighbour  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny-digitmap")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument(
        "--cores", type=core_pair, default="0,1", help="TIMED,NEIGHBOUR: the core timed and the one kept busy"
    )
    ap.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md")
    args = ap.parse_args()
    timed_core, neighbour_core = args.cores
    os.sched_setaffinity(0, {int(timed_core)})

    import torch

    from swarmnode.allocator import keep_freed_memory
    from swarmnode.config import load_config
    from swarmnode.local.trainer import LocalTrainer

    keep_freed_memory()  # as every swarmnode command does
    torch.set_num_threads(1)
    trainer = LocalTrainer(load_config(args.config, []), progress=None)

    def timed() -> tuple[float, float]:
        """One round of train-local's loop: ms for the rollout batch, ms for the learner's step on it."""
        batch, step = timed_round(trainer)
        if step is None:
            raise SystemExit(f"{args.config}: one rollout batch is too small for a learner step")
        return batch * 1000, step * 1000

    load = [round(x, 2) for x in os.getloadavg()]
    log = Path(tempfile.gettempdir()) / f"core-interference-neighbour-{os.getpid()}.log"  # its stderr
    timed()  # warm up
    rows = []
    for rnd in range(args.rounds):
        for mode in ("idle", "busy"):
            nb = start_neighbour(args.config, [], neighbour_core, log) if mode == "busy" else None
            try:
                times = [timed() for _ in range(args.batches)]
            finally:
                if nb is not None:
                    nb.kill()
                    nb.wait()
            row = {
                "round": rnd + 1,
                "neighbour": mode,
                "generate_ms": round(statistics.median(t[0] for t in times), 1),
                "train_ms": round(statistics.median(t[1] for t in times), 1),
            }
            rows.append(row)
            print(row, flush=True)
    summary = {}
    for key in ("generate_ms", "train_ms"):
        idle = statistics.median(r[key] for r in rows if r["neighbour"] == "idle")
        busy = statistics.median(r[key] for r in rows if r["neighbour"] == "busy")
        summary[key] = {"idle": round(idle, 1), "busy": round(busy, 1), "slowdown": round(busy / idle, 3)}
    doc = {
        "command": " ".join(["python bench/core-interference/core_interference.py", *sys.argv[1:]]),
        "config": args.config,
        "load_before": load,
        "rounds": rows,
        "summary": summary,
    }
    text = markdown(doc)
    print(text)
    write_results(args.out, doc, text)


def markdown(doc: dict) -> str:
    lines = [
        f"# core interference: `{doc['command']}`",
        "",
        f"load average before {doc['load_before']}; medians of each round's batches, ms on the timed core",
        "",
        "| round | neighbour core | generate (ms) | train (ms) |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['round']} | {r['neighbour']} | {r['generate_ms']} | {r['train_ms']} |" for r in doc["rounds"]]
    lines += ["", "| work | neighbour idle | neighbour busy | slowdown |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['idle']} | {v['busy']} | {v['slowdown']}x |" for k, v in doc["summary"].items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
