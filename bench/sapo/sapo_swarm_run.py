"""One real multi-process SAPO swarm run, compared with the in-process sweep's cells of the same shape.

Starts a bootstrap and `--nodes` `swarmnode join --set mode=sapo` processes on 127.0.0.1 (each its own p2pd, its
own policy, text shared over hivemind streams) and lets them train for `--minutes` (or until every node took
`--steps` steps). Then, over the first N steps every node reached, it prints the swarm's cumulative own reward
per node (SAPO's measure, as the sweep computes it) next to the sweep's cells for the same split and weighting
over their first N rounds (bench/sapo/results/sapo_sweep/cells.jsonl). Unlike the sweep the nodes do not move in
lockstep: a step takes the external groups that have arrived (waiting at most `sapo.external_wait`), possibly
made by peers' older policies, so the mean number of external groups per step is printed too.

    python bench/sapo/sapo_swarm_run.py [--nodes 4] [--steps 120] [--minutes 12] [--local 4] [--external 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT, use_test_helpers  # noqa: E402  (also puts this checkout's package first on sys.path)

use_test_helpers()  # the tests' process helpers
from swarm_helpers import LOOPBACK, LocalSwarm  # noqa: E402


def steps_of(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--minutes", type=float, default=12.0, help="training time budget after every node is ready")
    ap.add_argument("--local", type=int, default=4)
    ap.add_argument("--external", type=int, default=4)
    ap.add_argument("--weighting", default="on_policy")
    ap.add_argument("--out", default="bench/sapo/results/sapo_swarm_run.json")
    args = ap.parse_args(argv)
    sets = [
        "mode=sapo",
        f"sapo.local_groups={args.local}",
        f"sapo.external_groups={args.external}",
        f"sapo.external_weighting={args.weighting}",
        f"sapo.pool_per_peer={max(1, args.local)}",
        "sapo.external_wait=5",
        "sampler.max_groups_per_second=0",
    ]
    with tempfile.TemporaryDirectory(prefix="sapo-run-") as tmp, LocalSwarm(Path(tmp), run_id="sapo-bench") as swarm:
        root = Path(tmp)
        boot = swarm.spawn(
            "bootstrap",
            [
                "bootstrap",
                *[a for s in swarm.sets for a in ("--set", s)],
                "--host-maddrs",
                LOOPBACK,
                "--identity-path",
                str(root / "boot.key"),
            ],
        )
        swarm.initial_peers = boot.wait_line("initial-peers:", timeout=600)
        procs = []
        for i in range(args.nodes):
            extra = ["--config", "tiny-cpu", *[a for s in [*sets, f"data_dir={root / f'n{i}'}"] for a in ("--set", s)]]
            procs.append(swarm.join(f"n{i}", role="auto", work=True, wait=False, extra=extra))
        for proc in procs:
            proc.ready_fields(timeout=600)
        began = time.monotonic()
        files = [root / f"n{i}" / "sapo_steps.jsonl" for i in range(args.nodes)]
        while time.monotonic() - began < args.minutes * 60:
            if all(len(steps_of(f)) >= args.steps for f in files):
                break
            for proc in procs:
                if proc.popen.poll() is not None:
                    raise SystemExit(f"{proc.name} exited:\n{proc.stderr()[-3000:]}")
            time.sleep(2)
        wall = time.monotonic() - began
        rows = [steps_of(f) for f in files]
    n = min(args.steps, *(len(r) for r in rows))
    cumulative = [round(sum(r["own_reward"] for r in node[:n]), 3) for node in rows]
    external = [round(statistics.fmean(r["step_external_groups"] for r in node[:n]), 2) for node in rows]
    cell = f"h128x4_{args.local}-{args.external}_{args.weighting}_s"
    log = ROOT / "bench/sapo/results/sapo_sweep/cells.jsonl"
    sweep = [c for c in map(json.loads, filter(str.strip, log.read_text().splitlines())) if c["name"].startswith(cell)]
    sweep_n = [round(sum(c["curve"][:n]), 2) for c in sweep]  # curve: the mean over nodes of each round's own reward
    result = {
        "command": "python bench/sapo/sapo_swarm_run.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "nodes": args.nodes,
        "steps_compared": n,
        "steps_taken": [len(r) for r in rows],
        "training_wall_s": round(wall, 1),
        "cumulative_per_node": cumulative,
        "cumulative_mean": round(statistics.fmean(cumulative), 2),
        "external_per_step": external,
        "sweep_cells": [c["name"] for c in sweep],
        "sweep_cumulative_first_n": sweep_n,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
