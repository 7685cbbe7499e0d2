"""Latency-tolerance sweep: GEPO's stability table at our scale (issues #9 and #17).

Loss variants x maximum delay (learner steps) x seeds, each cell one single-process `LocalTrainer` run with the
tiny model, as the HeteroRL experiments did: the sampler adopts new weights only after a delay drawn log-normally
up to the maximum (median max/sqrt(32), sigma ln(32)/4, so the spread of delays spans 1:32 like the paper's
60-1920 s, capped at the maximum): it syncs continually, each sync delivering the version that was newest when it
started (as a swarm sampler does with `--simulate-delay` on weights), and rollouts carry their true version. A
seed sets the RL run's randomness (torch, prompt order, delays); the warm-started model and the held-out prompts
are the same in every cell. Every loss uses the same advantage scaling (the config's `scale_rewards`).

Every few steps the learner's policy is evaluated on the held-out prompts (mean reward of k samples per prompt
at the sampling temperature, mean@k) and, when the task has a validation split (digitmap), on the validation
prompts: "best" is the held-out score at the evaluation where the validation score peaks (the checkpoint one
would keep), "last" the final held-out score. Without a validation split, best = max of the 3-point moving
average of the held-out score. Per step the paper's importance-weight statistic (`ratio_peqq_var`: unbiased
variance of p_i / E_q[q] over shuffled 8-row micro-batches, the same for every loss) is reduced like the paper's:
mean over steps, median, mean over the last 10 % of steps; each loss's own weight variance beside it. KL figures
are medians over steps of KL(q || p) per token.

Each finished cell is appended to `<out>/cells.jsonl` at once and skipped when the sweep is run again, so a long
sweep can be stopped and resumed (cells in an older `<out>/cells/*.json` are read too). At the end the table
(`<out>.md`), the rows (`<out>.json`) and the figure (`<out>.png`) are written from every cell on disk.

    python bench/latency-tolerance/latency_sweep.py --config tiny-digitmap --out bench/latency-tolerance/results/latency_sweep_long   # the long sweep
    python bench/latency-tolerance/latency_sweep.py --quick --out /tmp/q    # pipeline check: 1 seed, delays 0 and 8, few steps
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import config_args  # noqa: E402  (also puts this checkout's package first on sys.path)

DEFAULT_VARIANTS = ["grpo", "gspo", "gspo-3e-4:learner.epsilon=3e-4,learner.epsilon_high=4e-4", "gepo"]
SPREAD = 32.0  # max/min delay ratio of the paper's log-normal (60 s .. 1920 s)


def parse_variant(spec: str) -> tuple[str, list[str]]:
    """'name[:k=v,k=v]' -> (name, overrides); the loss family is the name's part before the first '-'."""
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


def _checkpoint_choice(evals: list[dict]) -> tuple[float, float, int]:
    """(best, last, step of best): best = held-out score where the validation score peaks (first peak), or the
    max of the smoothed held-out score when there is no validation split; last = the final held-out score."""
    held = [e["eval_reward"] for e in evals]
    if evals and "val_reward" in evals[0]:
        i = max(range(len(evals)), key=lambda k: (evals[k]["val_reward"], -k))
        return held[i], held[-1], evals[i]["step"]
    ev = smoothed(held)
    i = max(range(len(ev)), key=lambda k: (ev[k], -k))
    return ev[i], ev[-1], evals[i]["step"]


def run_cell(job: dict) -> dict:
    """Train one cell and reduce it to the reported figures (runs in a worker process)."""
    import torch

    from swarmnode.config import load_config
    from swarmnode.local.trainer import LocalTrainer

    torch.set_num_threads(job["threads"])
    torch.manual_seed(job["seed"])
    _name, sets = parse_variant(job["variant"])
    cfg = load_config(
        job["config"], [*job["sets"], *sets, f"sync.max_staleness={job['max_staleness'] or job['delay'] + 8}"]
    )
    began, cpu_began = time.monotonic(), time.process_time()
    trainer = LocalTrainer(
        cfg,
        progress=None,
        delay=delay_model(job["delay"]),
        eval_every=job["eval_every"],
        eval_samples=job["eval_samples"],
        seed=job["seed"],
    )
    result = trainer.run(job["steps"])
    curve, evals = result["curve"], result["evals"]
    best, last, best_step = _checkpoint_choice(evals)
    kl_buckets: dict[str, list[float]] = {}
    for p in curve:
        for key, value in p.items():
            if key.startswith("kl_tau_"):
                kl_buckets.setdefault(key[len("kl_tau_") :], []).append(value)
    tenth = max(1, len(curve) // 10)
    fmean = lambda key, part=curve: statistics.fmean(p.get(key, 0.0) for p in part)  # noqa: E731
    return {
        **{k: job[k] for k in ("variant", "delay", "seed", "steps")},
        "seconds": round(time.monotonic() - began, 1),
        "cpu_seconds": round(time.process_time() - cpu_began, 1),
        "eval_best": best,
        "eval_last": last,
        "best_step": best_step,
        "eval_start": evals[0]["eval_reward"] if evals else None,
        "train_reward_start": fmean("reward_mean", curve[:tenth]),
        "train_reward_end": fmean("reward_mean", curve[-tenth:]),
        "completion_tokens": fmean("completion_length_mean"),
        "staleness_mean": fmean("staleness_mean"),
        "staleness_p99": percentile([p.get("staleness_max", 0.0) for p in curve], 0.99),
        "is_weight_var": fmean("is_weight_var"),
        "ratio_peqq_var": fmean("ratio_peqq_var"),
        "ratio_peqq_var_median": statistics.median(p.get("ratio_peqq_var", 0.0) for p in curve),
        "ratio_peqq_var_last": fmean("ratio_peqq_var", curve[-tenth:]),
        "kl": statistics.median(p["kl"] for p in curve),
        "kl_by_staleness": {k: statistics.median(v) for k, v in sorted(kl_buckets.items(), key=_bucket_order)},
        "entropy_start": fmean("entropy", curve[:tenth]),
        "entropy_end": fmean("entropy", curve[-tenth:]),
        "clip_fraction": fmean("clip_fraction"),
        "grad_norm_max": max(p["grad_norm"] for p in curve),
        "forced_syncs": result["forced_syncs"],
        "dropped_stale": result["buffer"]["counters"]["stale"],
        "evals": [[e["step"], round(e["eval_reward"], 4), round(e.get("val_reward", math.nan), 4)] for e in evals],
        "ratio_peqq_var_curve": [round(p.get("ratio_peqq_var", 0.0), 6) for p in curve],
    }


def _bucket_order(item: tuple[str, list[float]]) -> int:
    return int(item[0].split("-")[0])


def cell_name(variant: str, delay: int, seed: int) -> str:
    return f"{variant.partition(':')[0]}_d{delay}_s{seed}"


MEANS = (
    "eval_start",
    "eval_best",
    "eval_last",
    "train_reward_end",
    "completion_tokens",
    "staleness_mean",
    "staleness_p99",
    "is_weight_var",
    "ratio_peqq_var",
    "ratio_peqq_var_median",
    "ratio_peqq_var_last",
    "kl",
    "entropy_start",
    "entropy_end",
    "clip_fraction",
)


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
            row = {
                "variant": name,
                "delay": d,
                "seeds": len(mine),
                **{k: statistics.fmean(c.get(k, 0.0) for c in mine) for k in MEANS},
            }
            buckets: dict[str, list[float]] = {}
            for c in mine:
                for k, v in c["kl_by_staleness"].items():
                    buckets.setdefault(k, []).append(v)
            row.update(
                {
                    "eval_best_sd": statistics.pstdev(c["eval_best"] for c in mine),
                    "drop_pct": 100 * (1 - row["eval_best"] / statistics.fmean(base)) if base else None,
                    "best_to_last": row["eval_best"] - row["eval_last"],
                    "kl_by_staleness": {k: statistics.fmean(v) for k, v in sorted(buckets.items(), key=_bucket_order)},
                    "grad_norm_max": max(c["grad_norm_max"] for c in mine),
                    "minutes": sum(c["seconds"] for c in mine) / 60,
                }
            )
            rows.append(row)
    return rows


def markdown(rows: list[dict], header: str) -> str:
    out = [
        header,
        "",
        "| variant | max delay | seeds | completion tokens | eval start | best (by validation) | last "
        "| drop vs delay 0 | best-to-last | train end | staleness mean / p99 | ratio_pEqQ var mean / median / "
        "last 10 % | own IS-weight var | KL median | entropy start -> end | clip frac | max grad norm |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        drop = "—" if r["drop_pct"] is None or r["delay"] == 0 else f"{r['drop_pct']:+.1f} %"
        out.append(
            f"| {r['variant']} | {r['delay']} | {r['seeds']} | {r['completion_tokens']:.0f} | {r['eval_start']:.3f} "
            f"| {r['eval_best']:.3f} ± {r['eval_best_sd']:.3f} | {r['eval_last']:.3f} | {drop} "
            f"| {r['best_to_last']:+.3f} | {r['train_reward_end']:.3f} | {r['staleness_mean']:.1f} / "
            f"{r['staleness_p99']:.0f} | {r['ratio_peqq_var']:.3g} / {r['ratio_peqq_var_median']:.3g} / "
            f"{r['ratio_peqq_var_last']:.3g} | {r['is_weight_var']:.3g} | {r['kl']:.2g} | {r['entropy_start']:.3f} "
            f"-> {r['entropy_end']:.3f} | {r['clip_fraction']:.2f} | {r['grad_norm_max']:.2f} |"
        )
    kl_lines = [
        f"- {r['variant']} delay {r['delay']}: " + ", ".join(f"{k}: {v:.2g}" for k, v in r["kl_by_staleness"].items())
        for r in rows
    ]
    return (
        "\n".join(
            out
            + [
                "",
                "KL(q || p) per token by staleness (medians over steps, mean over seeds):",
                "",
                *kl_lines,
                "",
                *verdict(rows),
            ]
        )
        + "\n"
    )


def verdict(rows: list[dict]) -> list[str]:
    """The three questions of issue #17, answered from the rows (GRPO, GSPO at 0.2, GEPO)."""
    by = {(r["variant"], r["delay"]): r for r in rows}
    lines = ["## Answers", ""]
    for d in sorted({r["delay"] for r in rows}):
        trio = [by.get((v, d)) for v in ("grpo", "gspo", "gepo")]
        if all(trio):
            vals = [t["ratio_peqq_var"] for t in trio]
            ok = vals[0] > vals[1] > vals[2]
            lines.append(
                f"- Variance ordering GRPO > GSPO > GEPO at delay {d} (mean ratio_pEqQ var "
                f"{vals[0]:.3g} / {vals[1]:.3g} / {vals[2]:.3g}): {'reproduced' if ok else 'not reproduced'}"
            )
    top = max((r["delay"] for r in rows if r["variant"] == "gepo"), default=None)
    if top and by.get(("gepo", top)) and by[("gepo", top)]["drop_pct"] is not None:
        drop = by[("gepo", top)]["drop_pct"]
        lines.append(
            f"- GEPO's drop in best held-out reward from delay 0 to {top}: {drop:+.1f} % "
            f"({'within' if drop <= 3 else 'beyond'} 3 %)"
        )
    for d in sorted({r["delay"] for r in rows}):
        gaps = {r["variant"]: r["best_to_last"] for r in rows if r["delay"] == d}
        if "gepo" in gaps and len(gaps) > 1:
            low = min(gaps.values())
            smallest = [k for k, v in gaps.items() if v <= low + 1e-9]
            answer = (
                "yes"
                if smallest == ["gepo"]
                else "tied: " + ", ".join(smallest)
                if "gepo" in smallest
                else "no: " + ", ".join(smallest)
            )
            lines.append(
                f"- Best-to-last gap at delay {d}: "
                + ", ".join(f"{k} {v:+.3f}" for k, v in gaps.items())
                + f"; GEPO's the smallest? {answer}"
            )
    return lines


def figure(cells: list[dict], rows: list[dict], variants: list[str], delays: list[int], path: Path) -> None:
    """Left: mean held-out eval curves per variant at the largest delay vs delay 0. Middle: best/last vs delay.
    Right: the paper's ratio_pEqQ variance (mean over steps) and max gradient norm vs delay (log scale)."""
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
            ax1.plot(steps, mean, style, color=colors[name], label=f"{name} delay {d}")
    ax1.set(xlabel="learner step", ylabel="held-out mean@k reward", title="held-out eval reward (mean over seeds)")
    ax1.legend(fontsize=7)
    panels = (
        (ax2, "eval_best", "o-", "best"),
        (ax2, "eval_last", "x--", "last"),
        (ax3, "ratio_peqq_var", "o-", "ratio_pEqQ var"),
        (ax3, "grad_norm_max", "s:", "max grad norm"),
    )
    for name in names:
        mine = [r for r in rows if r["variant"] == name]
        for ax, key, style, label in panels:
            ax.plot(
                [r["delay"] for r in mine], [r[key] for r in mine], style, color=colors[name], label=f"{name} {label}"
            )
    ax3.set(xlabel="max delay (learner steps)", title="paper's IS-weight variance and max grad norm", yscale="log")
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


def load_cells(out: Path) -> dict[str, dict]:
    """Finished cells by name: `<out>/cells.jsonl` (one per line) and any older `<out>/cells/*.json`."""
    cells = {}
    for path in sorted((out / "cells").glob("*.json")) if (out / "cells").is_dir() else []:
        cell = json.loads(path.read_text())
        cells[cell_name(cell["variant"], cell["delay"], cell["seed"])] = cell
    jsonl = out / "cells.jsonl"
    if jsonl.is_file():
        for line in jsonl.read_text().splitlines():
            if line.strip():
                cell = json.loads(line)
                cells[cell_name(cell["variant"], cell["delay"], cell["seed"])] = cell
    return cells


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config_args(ap, "tiny-cpu")
    ap.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, help="name[:k=v,...]; name starts with the loss")
    ap.add_argument("--delays", nargs="+", type=int, default=[0, 8, 32, 64])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--eval-samples", type=int, default=16)
    ap.add_argument("--max-staleness", type=int, default=0, help="sync.max_staleness; 0 = max delay + 8 (never binds)")
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="cells run in parallel, in worker processes (one torch thread each); 1 = in this process",
    )
    ap.add_argument(
        "--out",
        default="bench/latency-tolerance/results/latency_sweep",
        help="writes <out>.md/.json/.png, <out>/cells.jsonl",
    )
    ap.add_argument("--quick", action="store_true", help="pipeline check: seed 0, delays 0 and 8, 12 steps")
    ap.add_argument("--render-only", action="store_true", help="write the table and figure from the cells on disk")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.delays, args.steps, args.eval_every, args.eval_samples = [0], [0, 8], 12, 4, 2
    for v in args.variants:
        parse_variant(v)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    done = load_cells(out)
    jobs = []
    ends = [d for d in args.delays if d in (min(args.delays), max(args.delays))]
    order = [
        (seed, d)
        for phase in (ends, [d for d in args.delays if d not in ends])  # delay 0 and the largest
        for seed in args.seeds
        for d in phase
    ]  # first, seed by seed: an interrupted sweep still compares them
    for seed, d in order:
        for v in args.variants:
            if cell_name(v, d, seed) in done or args.render_only:
                continue
            jobs.append(
                {
                    "variant": v,
                    "delay": d,
                    "seed": seed,
                    "steps": args.steps,
                    "config": args.config,
                    "sets": args.sets,
                    "eval_every": args.eval_every,
                    "eval_samples": args.eval_samples,
                    "max_staleness": args.max_staleness,
                    "threads": 1,
                }
            )
    print(f"{len(done)} cells on disk, {len(jobs)} to run ({args.jobs} at a time)", flush=True)
    began = time.monotonic()
    pool = multiprocessing.get_context("spawn").Pool(args.jobs) if args.jobs > 1 and len(jobs) > 1 else None
    try:
        for cell in pool.imap_unordered(run_cell, jobs) if pool else map(run_cell, jobs):  # saved as each ends
            with open(out / "cells.jsonl", "a") as f:
                f.write(json.dumps(cell) + "\n")
                f.flush()
                os.fsync(f.fileno())
            name = cell_name(cell["variant"], cell["delay"], cell["seed"])
            done[name] = cell
            print(
                f"{name}: eval {cell['eval_start']:.3f} -> best "
                f"{cell['eval_best']:.3f} last {cell['eval_last']:.3f}  staleness {cell['staleness_mean']:.1f}  "
                f"pEqQ var {cell['ratio_peqq_var']:.3g}  {cell['seconds']:.0f} s",
                flush=True,
            )
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    wall = time.monotonic() - began
    names = {v.partition(":")[0] for v in args.variants}
    cells = [
        c
        for c in done.values()
        if c["delay"] in args.delays and c["seed"] in args.seeds and c["variant"].partition(":")[0] in names
    ]
    rows = aggregate(cells, args.variants, args.delays)
    cell_seconds = sum(c["seconds"] for c in cells)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    command = " ".join(a for a in (sys.argv[1:] if argv is None else argv) if a != "--render-only")
    planned = len(args.seeds) * len(args.delays) * len(args.variants)
    missing = (
        ""
        if len(cells) >= planned
        else (
            f" {planned - len(cells)} of the {planned} planned cells have not run "
            "yet: the same command runs them (finished cells are skipped)."
        )
    )
    header = (
        f"# Latency sweep\n\nCommand: `python bench/latency-tolerance/latency_sweep.py {command}`{missing}"
        f"\n\n{len(cells)} cells, {args.steps} learner steps each, config {args.config}"
        f"{''.join(' --set ' + s for s in args.sets)}, eval every {args.eval_every} steps on the held-out prompts (mean@"
        f"{args.eval_samples} at the sampling temperature). Cost: the cells' run times add up to "
        f"{cell_seconds / 60:.1f} minutes (one torch thread each, {platform.machine()}, "
        f"{multiprocessing.cpu_count()} cores shared with other work, load average {load:.1f} at the end; "
        f"{len(jobs)} cells run by this invocation in {wall / 60:.1f} min wall, --jobs {args.jobs}). Delay per "
        f"version: log-normal, median max/sqrt(32), sigma ln(32)/4, capped at the max (0 = on-policy)."
    )
    out.with_suffix(".md").write_text(markdown(rows, header))
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    figure(cells, rows, args.variants, args.delays, out.with_suffix(".png"))
    print(markdown(rows, header))
    print(f"wrote {out.with_suffix('.md')}, {out.with_suffix('.json')} and {out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
