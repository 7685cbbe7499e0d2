"""Latency-tolerance sweep: GEPO's stability table at our scale (issue #9).

Loss variants x maximum delay (learner steps) x seeds, each cell one single-process `LocalTrainer` run on the
built-in task with the tiny model, as the HeteroRL experiments did: the sampler adopts new weights only after
a delay drawn log-normally up to the maximum (median max/sqrt(32), sigma ln(32)/4, so the spread of delays
spans 1:32 like the paper's 60-1920 s, capped at the maximum): it syncs continually, each sync delivering the
version that was newest when it started (as a swarm sampler does with `--simulate-delay` on weights), and
rollouts carry their true version. A seed sets the RL run's randomness (torch, prompt order, delays); the
warm-started model and the held-out prompts are the same in every cell. KL figures are medians over steps (the
k3 estimate is heavy-tailed: one token whose probability fell by e^6 makes a step's mean jump to ~10). The
learner's policy is evaluated every few steps on the held-out prompts: mean reward of k samples per prompt at
the sampling temperature (mean@k; exact@k is the share of fully right answers).

Each finished cell is written to `<out>/cells/<cell>.json` at once and skipped when the sweep is run again, so a
long sweep can be stopped and resumed. At the end the table (`<out>.md`) and the figure (`<out>.png`) are
written from every cell on disk.

    python bench/latency_sweep.py                         # the full sweep (hours on 2 cores with --jobs 1)
    python bench/latency_sweep.py --quick --out /tmp/q    # pipeline check: 1 seed, delays 0 and 8, few steps
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import platform
import statistics
import sys
import time
from pathlib import Path

DEFAULT_VARIANTS = ["grpo", "gspo", "gepo", "gepo-def0.5:learner.gepo_defensive_lambda=0.5"]
SPREAD = 32.0  # max/min delay ratio of the paper's log-normal (60 s .. 1920 s)


def parse_variant(spec: str) -> tuple[str, list[str]]:
    """'name[:k=v,k=v]' -> (name, overrides); the loss type is the name's part before the first '-'."""
    from swarmnode.config import LEVEL_OF_ALGORITHM

    name, _, sets = spec.partition(":")
    loss = name.split("-")[0]
    if loss not in ("grpo", "gspo", "gepo"):
        raise SystemExit(f"variant {spec!r}: its name must start with grpo, gspo or gepo")
    return name, [f"learner.importance_sampling_level={LEVEL_OF_ALGORITHM[loss]}", *[s for s in sets.split(",") if s]]


def delay_model(max_delay: int):
    """The per-version delay distribution (in learner steps) for a maximum delay."""
    from swarmnode.delay import DelayModel

    if max_delay == 0:
        return None  # on-policy
    return DelayModel("lognormal", math.log(max_delay / math.sqrt(SPREAD)), math.log(SPREAD) / 4, float(max_delay))


def smoothed(values: list[float], k: int = 3) -> list[float]:
    """Trailing moving average over k points (so 'best' is not the luckiest single noisy evaluation)."""
    return [statistics.fmean(values[max(0, i - k + 1) : i + 1]) for i in range(len(values))]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.ceil(q * len(ordered))) - 1)] if ordered else 0.0


def run_cell(job: dict) -> dict:
    """Train one cell and reduce it to the reported figures (runs in a worker process)."""
    import torch

    from swarmnode.config import load_config
    from swarmnode.local_trainer import LocalTrainer

    torch.set_num_threads(job["threads"])
    torch.manual_seed(job["seed"])
    _name, sets = parse_variant(job["variant"])
    cfg = load_config(job["config"], [*job["sets"], *sets,
                                      f"sync.max_staleness={job['max_staleness'] or job['delay'] + 8}"])
    began = time.monotonic()
    trainer = LocalTrainer(cfg, progress=None, delay=delay_model(job["delay"]), eval_every=job["eval_every"],
                           eval_samples=job["eval_samples"], seed=job["seed"])
    result = trainer.run(job["steps"])
    curve, evals = result["curve"], result["evals"]
    ev = smoothed([e["eval_reward"] for e in evals])
    stale_mean = [p.get("staleness_mean", 0.0) for p in curve]
    kl_buckets: dict[str, list[float]] = {}
    for p in curve:
        for key, value in p.items():
            if key.startswith("kl_tau_"):
                kl_buckets.setdefault(key[len("kl_tau_"):], []).append(value)
    tenth = max(1, len(curve) // 10)
    return {
        **{k: job[k] for k in ("variant", "delay", "seed", "steps")},
        "seconds": round(time.monotonic() - began, 1),
        "eval_best": max(ev) if ev else None,
        "eval_last": ev[-1] if ev else None,
        "eval_start": evals[0]["eval_reward"] if evals else None,
        "train_reward_start": statistics.fmean(p["reward_mean"] for p in curve[:tenth]),
        "train_reward_end": statistics.fmean(p["reward_mean"] for p in curve[-tenth:]),
        "staleness_mean": statistics.fmean(stale_mean),
        "staleness_p99": percentile([p.get("staleness_max", 0.0) for p in curve], 0.99),
        "is_weight_var": statistics.fmean(p["is_weight_var"] for p in curve),
        "kl": statistics.median(p["kl"] for p in curve),
        "kl_by_staleness": {k: statistics.median(v) for k, v in sorted(kl_buckets.items(), key=_bucket_order)},
        "clip_fraction": statistics.fmean(p["clip_fraction"] for p in curve),
        "grad_norm_max": max(p["grad_norm"] for p in curve),
        "forced_syncs": result["forced_syncs"],
        "dropped_stale": result["buffer"]["counters"]["stale"],
        "evals": [[e["step"], round(e["eval_reward"], 4)] for e in evals],
    }


def _bucket_order(item: tuple[str, list[float]]) -> int:
    return int(item[0].split("-")[0])


def cell_name(variant: str, delay: int, seed: int) -> str:
    return f"{variant.partition(':')[0]}_d{delay}_s{seed}"


def aggregate(cells: list[dict], variants: list[str], delays: list[int]) -> list[dict]:
    """One row per (variant, delay): means over seeds, and the drop of best eval from the same variant's delay 0."""
    rows = []
    for spec in variants:
        name = spec.partition(":")[0]
        base = [c["eval_best"] for c in cells if c["variant"].partition(":")[0] == name and c["delay"] == 0]
        for d in delays:
            mine = [c for c in cells if c["variant"].partition(":")[0] == name and c["delay"] == d]
            if not mine:
                continue
            mean = lambda key: statistics.fmean(c[key] for c in mine)  # noqa: E731
            best, last = mean("eval_best"), mean("eval_last")
            buckets: dict[str, list[float]] = {}
            for c in mine:
                for k, v in c["kl_by_staleness"].items():
                    buckets.setdefault(k, []).append(v)
            rows.append({
                "variant": name, "delay": d, "seeds": len(mine),
                "eval_start": mean("eval_start"), "eval_best": best, "eval_last": last,
                "eval_best_sd": statistics.pstdev(c["eval_best"] for c in mine),
                "drop_pct": 100 * (1 - best / statistics.fmean(base)) if base else None,
                "last_to_best": best - last,
                "train_end": mean("train_reward_end"),
                "staleness_mean": mean("staleness_mean"), "staleness_p99": mean("staleness_p99"),
                "is_weight_var": mean("is_weight_var"), "kl": mean("kl"),
                "kl_by_staleness": {k: statistics.fmean(v) for k, v in sorted(buckets.items(), key=_bucket_order)},
                "clip_fraction": mean("clip_fraction"), "grad_norm_max": max(c["grad_norm_max"] for c in mine),
            })
    return rows


def markdown(rows: list[dict], header: str) -> str:
    out = [header, "",
           "| variant | max delay | seeds | eval start | best | last | drop vs delay 0 | last-to-best | train end "
           "| staleness mean / p99 | IS-weight var | KL (median) | KL by staleness (median) | clip frac | max grad norm |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        drop = "—" if r["drop_pct"] is None or r["delay"] == 0 else f"{r['drop_pct']:+.1f} %"
        kl_b = ", ".join(f"{k}: {v:.2g}" for k, v in r["kl_by_staleness"].items())
        out.append(
            f"| {r['variant']} | {r['delay']} | {r['seeds']} | {r['eval_start']:.3f} | {r['eval_best']:.3f} "
            f"± {r['eval_best_sd']:.3f} | {r['eval_last']:.3f} | {drop} | {r['last_to_best']:.3f} "
            f"| {r['train_end']:.3f} | {r['staleness_mean']:.1f} / {r['staleness_p99']:.0f} "
            f"| {r['is_weight_var']:.3g} | {r['kl']:.2g} | {kl_b} | {r['clip_fraction']:.2f} "
            f"| {r['grad_norm_max']:.2f} |")
    return "\n".join(out) + "\n"


def figure(cells: list[dict], rows: list[dict], variants: list[str], delays: list[int], path: Path) -> None:
    """Left: mean held-out eval curves per variant at the largest delay vs delay 0. Middle: best/last vs delay.
    Right: max gradient norm and IS-weight variance vs delay (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [v.partition(":")[0] for v in variants]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(18, 4.8))
    colors = dict(zip(names, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for name in names:
        for d, style in ((0, ":"), (max(delays), "-")):
            mine = [c for c in cells if c["variant"].partition(":")[0] == name and c["delay"] == d]
            if not mine:
                continue
            n = min(len(c["evals"]) for c in mine)
            steps = [mine[0]["evals"][i][0] for i in range(n)]
            mean = [statistics.fmean(c["evals"][i][1] for c in mine) for i in range(n)]
            ax1.plot(steps, smoothed(mean), style, color=colors[name], label=f"{name} delay {d}")
    ax1.set(xlabel="learner step", ylabel="held-out mean@k reward", title="eval reward (3-point average)")
    ax1.legend(fontsize=7)
    panels = ((ax2, "eval_best", "o-", "best"), (ax2, "eval_last", "x--", "last"),
              (ax3, "grad_norm_max", "o-", "max grad norm"), (ax3, "is_weight_var", "s:", "IS-weight var"))
    for name in names:
        mine = [r for r in rows if r["variant"] == name]
        for ax, key, style, label in panels:
            ax.plot([r["delay"] for r in mine], [r[key] for r in mine], style, color=colors[name],
                    label=f"{name} {label}")
    ax3.set(xlabel="max delay (learner steps)", title="max gradient norm and IS-weight variance", yscale="log")
    ax3.set_ylim(bottom=1e-3)  # on-policy GRPO/GSPO weights are exactly 1: variance ~1e-13
    ax3.legend(fontsize=7)
    for ax in (ax2, ax3):
        ax.set_xscale("symlog", linthresh=8)
        ax.set_xticks(delays, [str(d) for d in delays])
        ax.minorticks_off()
    ax2.set(xlabel="max delay (learner steps)", ylabel="held-out mean@k reward", title="best and last vs delay")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="tiny-cpu")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override for every cell")
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, help="name[:k=v,...]; name starts with the loss")
    ap.add_argument("--delays", nargs="+", type=int, default=[0, 8, 32, 64])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--eval-samples", type=int, default=16)
    ap.add_argument("--max-staleness", type=int, default=0, help="sync.max_staleness; 0 = max delay + 8 (never binds)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="cells run in parallel, in worker processes (one torch thread each); 1 = in this process")
    ap.add_argument("--out", default="bench/results/latency_sweep", help="writes <out>.md, <out>.png, <out>/cells/")
    ap.add_argument("--quick", action="store_true", help="pipeline check: seed 0, delays 0 and 8, 12 steps")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.delays, args.steps, args.eval_every, args.eval_samples = [0], [0, 8], 12, 4, 2
    for v in args.variants:
        parse_variant(v)
    out = Path(args.out)
    cells_dir = out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    jobs, cells = [], []
    for seed in args.seeds:
        for d in args.delays:
            for v in args.variants:
                path = cells_dir / f"{cell_name(v, d, seed)}.json"
                if path.is_file():
                    cells.append(json.loads(path.read_text()))
                    continue
                jobs.append({"variant": v, "delay": d, "seed": seed, "steps": args.steps, "config": args.config,
                             "sets": args.sets, "eval_every": args.eval_every, "eval_samples": args.eval_samples,
                             "max_staleness": args.max_staleness, "threads": 1, "path": str(path)})
    print(f"{len(cells)} cells on disk, {len(jobs)} to run ({args.jobs} at a time)", flush=True)
    began = time.monotonic()
    pool = multiprocessing.get_context("spawn").Pool(args.jobs) if args.jobs > 1 and len(jobs) > 1 else None
    try:
        for job, cell in zip(jobs, pool.imap(run_cell, jobs) if pool else map(run_cell, jobs)):
            Path(job["path"]).write_text(json.dumps(cell, indent=1))
            cells.append(cell)
            print(f"{cell_name(job['variant'], job['delay'], job['seed'])}: eval {cell['eval_start']:.3f} -> best "
                  f"{cell['eval_best']:.3f} last {cell['eval_last']:.3f}  staleness {cell['staleness_mean']:.1f}  "
                  f"{cell['seconds']:.0f} s", flush=True)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    wall = time.monotonic() - began
    cells = [c for c in cells if c["delay"] in args.delays and c["seed"] in args.seeds
             and c["variant"].partition(":")[0] in {v.partition(":")[0] for v in args.variants}]
    rows = aggregate(cells, args.variants, args.delays)
    cell_seconds = sum(c["seconds"] for c in cells)
    header = (f"# Latency sweep\n\nCommand: `python bench/latency_sweep.py {' '.join(sys.argv[1:] if argv is None else argv)}`"
              f"\n\n{len(cells)} cells, {args.steps} learner steps each, eval every {args.eval_every} steps on the "
              f"held-out prompts (mean@{args.eval_samples} at the sampling temperature; best = max of the 3-point "
              f"moving average, last = its final point). Cost: the cells' run times add up to {cell_seconds / 60:.1f} "
              f"minutes (one torch thread each, {platform.machine()}, {multiprocessing.cpu_count()} cores shared "
              f"with other work; {len(jobs)} cells run by this invocation in {wall / 60:.1f} min wall, --jobs "
              f"{args.jobs}). Delay per version: log-normal, median max/sqrt(32), "
              f"sigma ln(32)/4, capped at the max (0 = on-policy).")
    out.with_suffix(".md").write_text(markdown(rows, header))
    (out / "rows.json").write_text(json.dumps(rows, indent=1))
    figure(cells, rows, args.variants, args.delays, out.with_suffix(".png"))
    print(markdown(rows, header))
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
