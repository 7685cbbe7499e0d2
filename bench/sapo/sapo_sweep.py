"""SAPO/HDEE sweep: N own policies in one process sharing rollouts as text (issue #18).

Each cell is one in-process swarm of N `SapoPolicy` nodes (no network) on the built-in task, trained in rounds as
SAPO's experiments were: every node generates its I local groups with its current weights, every node's text
goes to every other node's pool, then every node takes one optimiser step on its I local + up to J external
groups (at most `sapo.max_groups_per_peer` from any one peer, re-tokenised and re-scored by the receiver). Each
step's batch is I + J = 8 groups of G = 8 completions, whatever the split.

Reported per node and for the swarm: the cumulative reward (SAPO's measure: the sum over rounds of the mean
reward of the node's own generated completions, i.e. of what its policy produces while training), and the
held-out eval reward (mean@k on the task's eval prompts) before and after training.

Cells (`--grid`): `splits` = 8/0, 6/2, 4/4, 2/6 with SAPO's ratio-1 weighting (`on_policy`); `weighting` = 4/4
with the GEPO-style `sender_likelihood`; `hdee` = a mixed-size swarm (2 x hidden 64 + 2 x hidden 128) against a
same-budget same-size one (4 x hidden 128 with intermediate 90: the same total parameter count, 0.87 M), at 4/4
(`hdee`) and at 8/0 (`hdee-silo`). A seed sets the run's randomness (torch, prompt order); the warm-started models are the same.

Every finished cell is appended to `<out>/cells.jsonl` at once and skipped when the sweep runs again, so it can
be stopped and resumed. The table (`<out>.md`) and figure (`<out>.png`) are written from every cell on disk.

    nice -n 5 python bench/sapo/sapo_sweep.py                      # the full sweep
    python bench/sapo/sapo_sweep.py --quick --out /tmp/sapo_quick  # pipeline check: a few steps
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import config_args  # noqa: E402  (also puts this checkout's package first on sys.path)

SMALL = ["model.tiny.hidden_size=64", "model.tiny.num_attention_heads=1", "model.tiny.intermediate_size=128"]
BUDGET = ["model.tiny.intermediate_size=90"]  # 217,984 parameters: the mean of hidden 64 (90,816) and 128 (345,472)
SWARMS = {"h128x4": [[]] * 4, "mixed": [SMALL, [], SMALL, []], "budget": [BUDGET] * 4}
SPLITS = [(8, 0), (6, 2), (4, 4), (2, 6)]
SAPO_PAPER = {"8/0": "baseline", "6/2": "+?", "4/4": "+94 %", "2/6": "falls back below 4/4"}


def grid(name: str, seeds: list[int]) -> list[dict]:
    """The cells of one grid (see the module docstring)."""
    cells = []
    for seed in seeds:
        if name == "splits":
            cells += [dict(swarm="h128x4", local=i, external=j, weighting="on_policy", seed=seed) for i, j in SPLITS]
        elif name == "weighting":
            cells.append(dict(swarm="h128x4", local=4, external=4, weighting="sender_likelihood", seed=seed))
        elif name in ("hdee", "hdee-silo"):
            i, j = (4, 4) if name == "hdee" else (8, 0)
            cells += [dict(swarm=s, local=i, external=j, weighting="on_policy", seed=seed) for s in ("mixed", "budget")]
        else:
            raise SystemExit(f"--grid {name!r}: expected splits, weighting, hdee or hdee-silo")
    return cells


def cell_name(cell: dict) -> str:
    return f"{cell['swarm']}_{cell['local']}-{cell['external']}_{cell['weighting']}_s{cell['seed']}"


def run_cell(cell: dict, steps: int, eval_samples: int, config: str, sets: list[str]) -> dict:
    """Train one in-process swarm and reduce it to the reported figures."""
    import torch

    from swarmnode.config import load_config
    from swarmnode.identity import Identity
    from swarmnode.local.evaluation import evaluate
    from swarmnode.model.models import count_parameters
    from swarmnode.node.sapo.policy import SapoPolicy

    torch.manual_seed(cell["seed"])
    began = time.monotonic()
    nodes = []
    for index, size in enumerate(SWARMS[cell["swarm"]]):
        cfg = load_config(
            config,
            [
                *sets,
                *size,
                f"sapo.local_groups={cell['local']}",
                f"sapo.external_groups={cell['external']}",
                f"sapo.external_weighting={cell['weighting']}",
                f"sapo.pool_per_peer={max(1, cell['local'])}",
            ],
        )
        policy = SapoPolicy(cfg, Identity.generate(), seed=cell["seed"] * 100 + index)
        nodes.append((cfg, policy, count_parameters(cfg.model)))
    task_eval = lambda cfg, p: evaluate(  # noqa: E731
        p.model,
        p.tokenizer,
        p.task,
        samples=eval_samples,
        temperature=cfg.sampler.temperature,
        max_new_tokens=cfg.sampler.max_completion_length,
        max_prompt_tokens=cfg.sampler.max_prompt_length,
        seed=0,
    )["eval_reward"]
    eval_start = [task_eval(cfg, p) for cfg, p, _ in nodes]
    own = [[] for _ in nodes]
    external = [0 for _ in nodes]
    lies = 0
    for _ in range(steps):
        texts = [p.generate() for _, p, _ in nodes]
        if cell["external"]:
            for i, (_, p, _) in enumerate(nodes):
                for j, shared in enumerate(texts):
                    if i != j:
                        for group in shared:
                            p.receive(group)
        for i, (_, p, _) in enumerate(nodes):
            diag = p.train_step()
            own[i].append(p.last_own_reward)
            external[i] += int(diag["external_groups"]) if diag else 0
    eval_end = [task_eval(cfg, p) for cfg, p, _ in nodes]
    for _, p, _ in nodes:
        lies += sum(p.rescorer.lies.values())
    return {
        **cell,
        "name": cell_name(cell),
        "steps": steps,
        "seconds": round(time.monotonic() - began, 1),
        "params": [n for _, _, n in nodes],
        "cumulative": [round(sum(r), 3) for r in own],
        "own_reward_first": [round(statistics.fmean(r[: max(1, steps // 10)]), 4) for r in own],
        "own_reward_last": [round(statistics.fmean(r[-max(1, steps // 10) :]), 4) for r in own],
        "curve": [round(statistics.fmean(col), 4) for col in zip(*own)],
        "eval_start": [round(x, 4) for x in eval_start],
        "eval_end": [round(x, 4) for x in eval_end],
        "external_trained": external,
        "reward_lies": lies,
    }


def _done(log: Path, steps: int) -> list[dict]:
    """The cells on disk (one per name: the first written wins when two sweeps ran the same cell)."""
    cells: dict[str, dict] = {}
    if log.is_file():
        for line in log.read_text().splitlines():
            if line.strip():
                cell = json.loads(line)
                if cell["steps"] == steps:
                    cells.setdefault(cell["name"], cell)
    return list(cells.values())


def _run_job(job: tuple) -> dict | None:
    """A worker's cell (None if another sweep writing the same log finished it meanwhile): one torch thread, the
    load average at its end recorded beside its figures."""
    import torch

    cell, steps, log = job[0], job[1], job[-1]
    if cell_name(cell) in {c["name"] for c in _done(log, steps)}:
        return None
    job = job[:-1]
    torch.set_num_threads(1)
    result = run_cell(*job)
    result["load"] = round(os.getloadavg()[0], 2)
    return result


def _mean(values) -> float:
    return statistics.fmean(values) if values else float("nan")


def aggregate(cells: list[dict]) -> list[dict]:
    """One row per (swarm, split, weighting): means over seeds and nodes, and the gain over the same swarm's 8/0."""
    keys = sorted(
        {(c["swarm"], c["local"], c["external"], c["weighting"]) for c in cells},
        key=lambda k: (list(SWARMS).index(k[0]), -k[1], k[3]),
    )
    rows = []
    for swarm, i, j, w in keys:
        mine = [c for c in cells if (c["swarm"], c["local"], c["external"], c["weighting"]) == (swarm, i, j, w)]
        base = [c for c in cells if c["swarm"] == swarm and c["external"] == 0]
        swarm_cum = [_mean(c["cumulative"]) for c in mine]  # per seed: the swarm's mean node
        base_cum = _mean([_mean(c["cumulative"]) for c in base])
        rows.append(
            {
                "swarm": swarm,
                "split": f"{i}/{j}",
                "weighting": w,
                "seeds": len(mine),
                "steps": mine[0]["steps"],
                "cumulative": _mean(swarm_cum),
                "cumulative_sd": statistics.pstdev(swarm_cum),
                "gain_pct": 100 * (_mean(swarm_cum) / base_cum - 1) if base else None,
                "per_node": [round(_mean(col), 1) for col in zip(*[c["cumulative"] for c in mine])],
                "own_first": _mean([_mean(c["own_reward_first"]) for c in mine]),
                "own_last": _mean([_mean(c["own_reward_last"]) for c in mine]),
                "eval_start": _mean([_mean(c["eval_start"]) for c in mine]),
                "eval_end": _mean([_mean(c["eval_end"]) for c in mine]),
                "eval_end_sd": statistics.pstdev(_mean(c["eval_end"]) for c in mine),
                "eval_end_per_node": [round(_mean(col), 3) for col in zip(*[c["eval_end"] for c in mine])],
                "external": _mean([_mean(c["external_trained"]) for c in mine]),
                "params": sum(mine[0]["params"]),
            }
        )
    return rows


def markdown(rows: list[dict], header: str) -> str:
    out = [
        header,
        "",
        "| swarm (params) | I/J | external weighting | seeds | cumulative reward per node (mean ± sd over seeds) "
        "| vs same swarm 8/0 | per node | own reward first → last 10 % | eval start → end (sd) | eval end per node "
        "| external groups trained per node |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        gain = "—" if r["gain_pct"] is None or r["split"] == "8/0" else f"{r['gain_pct']:+.1f} %"
        out.append(
            f"| {r['swarm']} ({r['params'] / 1e6:.2f} M) | {r['split']} | {r['weighting']} | {r['seeds']} "
            f"| {r['cumulative']:.1f} ± {r['cumulative_sd']:.1f} | {gain} | {r['per_node']} "
            f"| {r['own_first']:.3f} → {r['own_last']:.3f} | {r['eval_start']:.3f} → {r['eval_end']:.3f} "
            f"({r['eval_end_sd']:.3f}) | {r['eval_end_per_node']} | {r['external']:.0f} |"
        )
    return "\n".join(out) + "\n"


def figure(cells: list[dict], path: Path) -> None:
    """Left: the swarm's mean own reward per round (smoothed) per split. Right: cumulative reward per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 4.8))
    groups: dict[str, list[dict]] = {}
    for c in cells:
        groups.setdefault(f"{c['swarm']} {c['local']}/{c['external']} {c['weighting']}", []).append(c)
    for label, mine in sorted(groups.items()):
        curve = [statistics.fmean(col) for col in zip(*[c["curve"] for c in mine])]
        k = 20
        smooth = [statistics.fmean(curve[max(0, t - k + 1) : t + 1]) for t in range(len(curve))]
        ax1.plot(smooth, label=label)
    ax1.set(xlabel="round", ylabel="mean own reward (20-round average)", title="reward of each node's own rollouts")
    ax1.legend(fontsize=7)
    labels = sorted(groups)
    for x, label in enumerate(labels):
        ys = [statistics.fmean(c["cumulative"]) for c in groups[label]]
        ax2.scatter([x] * len(ys), ys, s=14)
        ax2.hlines(statistics.fmean(ys), x - 0.3, x + 0.3)
    ax2.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=7)
    ax2.set(ylabel="cumulative reward per node", title="cumulative reward (dots: seeds; bar: mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config_args(ap, "tiny-cpu")
    ap.add_argument("--grids", nargs="+", default=["splits", "weighting", "hdee"])
    ap.add_argument("--jobs", type=int, default=1, help="cells run in parallel, in worker processes (one thread each)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--eval-samples", type=int, default=32)
    ap.add_argument(
        "--out", default="bench/sapo/results/sapo_sweep", help="writes <out>.md, <out>.png, <out>/cells.jsonl"
    )
    ap.add_argument("--report", action="store_true", help="write the table and figure from the cells on disk; run none")
    ap.add_argument("--reverse", action="store_true", help="run the cells in reverse order (a second sweep on one log)")
    ap.add_argument("--quick", action="store_true", help="pipeline check: seed 0, splits only, 6 steps")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.grids, args.steps, args.eval_samples = [0], ["splits"], 6, 1
    import torch

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "cells.jsonl"
    done = _done(log, args.steps)
    done_names = {c["name"] for c in done}
    # seed-major order: a sweep cut short still has every grid at the seeds it finished. Two sweeps may share one
    # log (e.g. a second one for the last seed): each skips what is on disk before starting a cell
    todo = [c for seed in args.seeds for g in args.grids for c in grid(g, [seed]) if cell_name(c) not in done_names]
    if args.reverse:
        todo.reverse()
    if args.report:
        todo = []
    print(f"{len(done_names)} cells on disk, {len(todo)} to run ({args.jobs} at a time)", flush=True)
    jobs = [(cell, args.steps, args.eval_samples, args.config, args.sets, log) for cell in todo]
    pool = multiprocessing.get_context("spawn").Pool(args.jobs) if args.jobs > 1 and len(jobs) > 1 else None
    try:
        for result in pool.imap_unordered(_run_job, jobs) if pool else map(_run_job, jobs):
            if result is None:
                continue
            with log.open("a") as f:
                f.write(json.dumps(result) + "\n")
            done.append(result)
            print(
                f"{result['name']}: cumulative {result['cumulative']} eval {result['eval_start']} -> "
                f"{result['eval_end']}  {result['seconds']:.0f} s (load {result['load']})",
                flush=True,
            )
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    cells = _done(log, args.steps)  # also what other sweeps on the same log wrote
    rows = aggregate(cells)
    seconds = sum(c["seconds"] for c in cells)
    loads = [c["load"] for c in cells]
    header = (
        f"# SAPO sweep\n\nCommand: `python bench/sapo/sapo_sweep.py {' '.join(sys.argv[1:] if argv is None else argv)}`"
        f"\n\n{len(cells)} cells, {args.steps} rounds each, 4 nodes per swarm, batch I + J = 8 groups x 8 "
        f"completions per step; eval = mean@{args.eval_samples} on the held-out prompts. Cost: "
        f"{seconds / 60:.1f} min of cell time in one process (one torch thread, {platform.machine()}, "
        f"{os.cpu_count()} cores shared with other work; load average {min(loads):.1f}-{max(loads):.1f} "
        f"at the cells' ends)."
    )
    (out.parent / f"{out.name}.md").write_text(markdown(rows, header))
    (out.parent / f"{out.name}.json").write_text(json.dumps(rows, indent=1))
    figure(cells, out.parent / f"{out.name}.png")
    print(markdown(rows, header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
