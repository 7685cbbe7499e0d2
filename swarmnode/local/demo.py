"""`swarmnode demo`: a local swarm (bootstrap, one learner or `--learners N` averaging ones, two samplers) as
separate processes on 127.0.0.1.

Each node is a real `swarmnode` subprocess. Each learner appends one JSON line per optimiser step to
`<its data dir>/learner_steps.jsonl` (see `swarmnode.learner.steps_log`); the demo reads those files for its live
view and final summary. With N > 1 learners (`learner.max_learners=N`) the samplers spread their groups over them
and they average through hivemind (`swarmnode.node.roles.averaging_rounds`). Every process the demo starts is stopped
by pid (SIGTERM, then SIGKILL) however the demo ends.
"""

from __future__ import annotations

import json
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from swarmnode.errors import Interrupted
from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.local.swarm import LEARNER_STOP_GRACE_S, DemoRun, learner_names, prepare_swarm, start_swarm
from swarmnode.observe.health import bucket_label


def read_steps(path: Path) -> list[dict]:
    """The learner's per-step records so far (a partially written last line is skipped)."""
    rows: list[dict] = []
    try:
        text = path.read_text()
    except OSError:
        return rows
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def staleness_histogram(rows: list[dict]) -> dict[str, int]:
    """Groups trained on, by staleness bucket ('0', '1', '2-3', ...), from the learner's cumulative counts."""
    counts = rows[-1].get("staleness_hist", []) if rows else []
    return {bucket_label(i): int(c) for i, c in enumerate(counts)}


def reward_trend(rewards: list[float]) -> dict[str, float | None]:
    """The least-squares line through the per-step rewards: `reward_gain` (its rise from the first step to the
    last) and `reward_trend_t` (its slope over the slope's standard error; None with fewer than 3 steps). Over a
    few hundred noisy steps (per-step sd ~0.06 on the tiny task) this tells learning from noise far better than
    comparing the first and last 10 %."""
    n = len(rewards)
    if n < 3:
        return {"reward_gain": None, "reward_trend_t": None}
    slope, intercept = statistics.linear_regression(range(n), rewards)
    residual = sum((y - intercept - slope * x) ** 2 for x, y in enumerate(rewards))
    sxx = n * (n * n - 1) / 12  # sum of (x - mean x)^2 over x = 0..n-1
    stderr = (residual / (n - 2) / sxx) ** 0.5
    t = slope / max(stderr, 1e-12)  # finite for a perfectly straight curve: the status JSON stays strict JSON
    return {"reward_gain": round(slope * (n - 1), 4), "reward_trend_t": round(t, 2)}


def summarize(rows: list[dict], wall: float) -> dict:
    """The final document: steps, versions, reward at start/end (first/last 10% of steps) and its fitted trend
    (`reward_trend`), staleness."""
    n = len(rows)
    tenth = max(1, n // 10)

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 4) if values else None

    rewards = [float(r.get("reward_mean", 0.0)) for r in rows]
    return {
        "learner_steps": n,
        "versions_published": max((int(r.get("version", 0)) for r in rows), default=0),
        "reward_start": mean(rewards[:tenth]),
        "reward_end": mean(rewards[-tenth:]),
        **reward_trend(rewards),
        "staleness_max": max((int(r.get("staleness_max", 0)) for r in rows), default=0),
        "staleness_mean": mean([float(r.get("staleness_mean", 0.0)) for r in rows]),
        "rollouts_received": max((int(r.get("groups_received", 0)) for r in rows), default=0),
        "dropped_stale": max((int(r.get("dropped_stale", 0)) for r in rows), default=0),
        "staleness_hist": staleness_histogram(rows),
        "wall_seconds": round(wall, 1),
        "reward_curve": [round(x, 4) for x in rewards],
    }


def learner_summary(rows: list[dict]) -> dict:
    """One learner's line of the summary: its steps, newest version, averaging rounds (0 alone) and end reward."""
    last = rows[-1] if rows else {}
    tail = [float(r.get("reward_mean", 0.0)) for r in rows[-max(1, len(rows) // 10) :]]
    return {
        "steps": len(rows),
        "version": int(last.get("version", 0)),
        "averaging_rounds": int(last.get("averaging_rounds") or 0),
        "averaging_failures": int(last.get("averaging_failures") or 0),
        "reward_end": round(sum(tail) / len(tail), 4) if rows else None,
    }


def summarize_learners(rows_by_learner: dict[str, list[dict]], wall: float) -> dict:
    """`summarize` of the whole run (every learner's steps in time order; counters summed over the learners) plus
    `learners`: each learner's `learner_summary`. With one learner, `summarize` of its steps."""
    each = list(rows_by_learner.values())
    merged = sorted((r for rows in each for r in rows), key=lambda r: float(r.get("time", 0.0)))
    out = summarize(merged, wall)
    if len(each) > 1:
        out["rollouts_received"] = sum(
            max((int(r.get("groups_received", 0)) for r in rows), default=0) for rows in each
        )
        out["dropped_stale"] = sum(max((int(r.get("dropped_stale", 0)) for r in rows), default=0) for rows in each)
        hists = [staleness_histogram(rows) for rows in each]
        out["staleness_hist"] = {b: sum(h.get(b, 0) for h in hists) for b in max(hists, key=len)}
    out["learners"] = {name: learner_summary(rows) for name, rows in rows_by_learner.items()}
    return out


def _live_table(rows_by_learner: dict[str, list[dict]], elapsed: float):
    table = Table(title=f"swarmnode demo — {elapsed:.0f} s", show_header=True)
    several = len(rows_by_learner) > 1  # then a learner column and its averaging rounds
    columns = ["steps", "version", "groups rcvd", "staleness (mean/max)", "reward (last 10)"]
    for col in ["learner", *columns, "avg rounds"] if several else columns:
        table.add_column(col)
    for name, rows in rows_by_learner.items():
        if rows:
            last = rows[-1]
            recent = [float(r.get("reward_mean", 0.0)) for r in rows[-10:]]
            cells = [
                str(len(rows)),
                str(last.get("version", 0)),
                str(last.get("groups_received", 0)),
                f"{float(last.get('staleness_mean', 0)):.1f} / {last.get('staleness_max', 0)}",
                f"{sum(recent) / len(recent):.3f}",
            ]
        else:
            cells = ["0", "-", "-", "-", "waiting for rollouts..."]
        table.add_row(
            *([name, *cells, str(rows[-1].get("averaging_rounds") or 0) if rows else "-"] if several else cells)
        )
    return table


def _number(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def format_summary(summary: dict) -> str:
    """The demo's summary for a person: what happened, in sentences and short lists (`--json` has every field)."""
    s = summary
    lines = [
        f"stopped: {s['stopped']} after {s['learner_steps']} learner steps in {s['wall_seconds']:.0f} s "
        f"({s['versions_published']} versions published)",
        f"reward: {_number(s['reward_start'])} -> {_number(s['reward_end'])} (first and last 10 % of steps; "
        f"fitted gain {_number(s['reward_gain'], '+.3f')}, t = {_number(s['reward_trend_t'], '.1f')})",
        f"staleness: mean {_number(s['staleness_mean'], '.2f')}, max {s['staleness_max']} versions; "
        f"{s['rollouts_received']} groups received, {s['dropped_stale']} dropped as too stale",
    ]
    hist = s.get("staleness_hist") or {}
    if hist:
        lines.append("groups trained by staleness: " + ", ".join(f"{b}: {n}" for b, n in hist.items()))
    for name, each in (s.get("learners") or {}).items():
        lines.append(
            f"{name}: {each['steps']} steps, version {each['version']}, {each['averaging_rounds']} "
            f"averaging rounds ({each['averaging_failures']} failed), reward at the end "
            f"{_number(each['reward_end'])}"
        )
    for name, each in (s.get("samplers") or {}).items():
        trained = f"steps {each['first_step']} to {each['last_step']}" if each["steps"] else "none"
        lines.append(f"{name}: its groups trained {each['steps']} learner steps ({trained})")
    if s.get("sampler_killed_at_step") is not None:
        lines.append(f"sampler2 was killed and restarted at learner step {s['sampler_killed_at_step']}")
    if s.get("workdir"):
        lines.append(f"work dir (logs, keys, checkpoints): {s['workdir']}")
    curve = s.get("reward_curve") or []
    if curve:
        lines.append(
            f"reward curve ({len(curve)} steps): " + " ".join(f"{x:.2f}" for x in curve[:: max(1, len(curve) // 20)])
        )
    return "\n".join(lines)


class _Terminated(Exception):
    """SIGTERM reached the demo: stop the nodes, summarise, exit 0."""


def _exit_on_sigterm(signum, frame) -> None:
    raise _Terminated


def sampler_contributions(rows: list[dict], samplers: dict[str, str]) -> dict[str, dict]:
    """Per sampler name: how many learner steps trained on its groups, and the first and last such step."""
    out = {}
    for name, peer_id in samplers.items():
        steps = [int(r.get("step", i + 1)) for i, r in enumerate(rows) if peer_id in r.get("sampler_ids", ())]
        out[name] = {"steps": len(steps), "first_step": min(steps, default=None), "last_step": max(steps, default=None)}
    return out


def run_demo(
    *,
    steps: int | None,
    minutes: float,
    quiet: bool,
    sets: list[str],
    workdir: str | None = None,
    kill_sampler_at: int | None = None,
    keep: bool = False,
    config: str = "tiny-cpu",
    learners: int = 1,
) -> dict:
    """Start the local swarm, watch the learners until each took `steps` steps or `minutes` passed, stop
    everything, summarise (`summarize_learners`).

    `config`: the preset or YAML every node runs with (`tiny-cpu`, `smollm2-135m`, ...).
    `learners`: how many learners (1 to `MAX_DEMO_LEARNERS`; above 1 they average, `learner.max_learners`).
    `kill_sampler_at`: when the learner reaches that step, SIGKILL sampler2 (and its p2pd) and start it again
    with the same identity and data directory; the summary says when, and which steps trained on its groups.
    Without `workdir` the nodes work in a temporary directory, removed at the end unless `keep`. Ctrl-C stops
    the nodes and returns the summary so far (`stopped: interrupted`); Ctrl-C before they start raises
    `Interrupted`.
    """
    learner_names(learners)  # a bad count fails before anything starts
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # SIGTERM too runs the `finally` that stops the nodes
    temporary = workdir is None and not keep
    root = Path(workdir or tempfile.mkdtemp(prefix="swarmnode-demo-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        summary = _run_swarm(root, steps, minutes, quiet, sets, kill_sampler_at, config, learners)
    finally:
        if temporary:
            shutil.rmtree(root, ignore_errors=True)
    summary["workdir"] = None if temporary else str(root)
    return summary


def stall_lines(root: Path, names: list[str], told: set[str]) -> list[str]:
    """The learners' lines saying why they take no step (`observe.stall`) not yet in `told` (added to it)."""
    new = []
    for name in names:
        log = root / f"{name}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        for line in text.splitlines():
            if line.startswith("learner: no learner step") and (said := f"{name}: {line[9:]}") not in told:
                told.add(said)
                new.append(said)
    return new


def _run_swarm(
    root: Path,
    steps: int | None,
    minutes: float,
    quiet: bool,
    sets: list[str],
    kill_sampler_at: int | None,
    config: str,
    learners: int,
) -> dict:
    from swarmnode.identity import Identity

    run = DemoRun(root)
    console = Console(stderr=True, quiet=quiet)
    samplers = {f"sampler{i}": Identity.load_or_create(root / f"sampler{i}.key").peer_id for i in (1, 2)}
    say = lambda msg: console.print(msg, soft_wrap=True)  # noqa: E731 (the bootstrap's address stays on one line)
    sets = prepare_swarm(root, config, sets, say, learners)
    names = learner_names(learners)
    read_all = lambda: {name: read_steps(root / name / STEPS_FILE) for name in names}  # noqa: E731
    start = time.monotonic()
    restarted_at = None
    told: set[str] = set()
    try:
        sampler_args = start_swarm(run, config, sets, say, learners)
        deadline = start + minutes * 60
        stopped = "minutes"
        with Live(
            _live_table(dict.fromkeys(names, []), 0), console=console, refresh_per_second=1, transient=quiet
        ) as live:
            try:
                while time.monotonic() < deadline:
                    run.check_alive()
                    rows = read_all()
                    live.update(_live_table(rows, time.monotonic() - start))
                    for line in stall_lines(root, names, told):  # no silent stall: the learner says why
                        console.print(line, soft_wrap=True)
                    if steps is not None and min(len(r) for r in rows.values()) >= steps:
                        stopped = "steps"
                        break
                    done = max(len(r) for r in rows.values())
                    if kill_sampler_at is not None and restarted_at is None and done >= kill_sampler_at:
                        restarted_at = done
                        run.kill("sampler2")
                        console.print(f"step {restarted_at}: killed sampler2 (SIGKILL); starting it again")
                        run.start("sampler2-restarted", sampler_args[2])
                    time.sleep(1.0)
            except Interrupted:
                stopped = "interrupted"
            except _Terminated:
                stopped = "terminated"
    finally:
        writes = "the learner writes its checkpoint" if learners == 1 else "each learner writes its checkpoint"
        console.print(f"\nstopping the nodes ({writes}: up to {LEARNER_STOP_GRACE_S:.0f} s)...")
        run.stop()
    rows = read_all()
    summary = summarize_learners(rows, time.monotonic() - start)
    summary["stopped"] = stopped
    summary["sampler_killed_at_step"] = restarted_at
    summary["samplers"] = sampler_contributions([r for each in rows.values() for r in each], samplers)
    summary["node_pids"] = [proc.popen.pid for proc in run.killed + run.procs]
    return summary
