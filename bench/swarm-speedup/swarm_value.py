"""The swarm's value on fixed learner hardware: does one extra core of samplers make a learner faster?

Arms, each given the same wall-clock budget from its launch, alternated `--repeats` times in one run:
- local: `swarmnode train-local` (sampler and learner in one loop) pinned to core 0 (`taskset -c 0`), on-policy;
  `local-s<N>` the same with `--staleness N` (the sampler holds the weights of N versions ago, as a swarm's do);
  `local-<name>` on-policy with its own `--arm-set` overrides (e.g. local-b8=sampler.prompts_per_batch=8);
  `local-busy` (or `local-busy-<name>`) the same with a neighbour on core 1 generating rollout batches the whole
  time (`bench/benchlib/neighbour_load.py`): the machine's other core as busy as the swarm keeps it (on a small VM two
  busy cores slow each other: shared caches, memory bandwidth or one physical core);
- swarm (and any `swarm-<name>` arm with its own `--arm-set` overrides): the demo swarm
  (`swarmnode.local.swarm.start_swarm`: bootstrap, learner, `--samplers` samplers as processes, all launched at
  the clock's start) with the learner (and its p2pd, a child process, so it inherits the pinning) on core 0 and
  the bootstrap and the samplers (and their p2pds) on core 1. The samplers' throttle is off (`--swarm-set`): they
  have a core of their own.
- warm (and `warm-<name>`): the same swarm, but a learner joining a running one: the bootstrap and samplers are
  started and ready (model loaded, waiting for a learner) before the clock starts at the learner's launch.
- a swarm arm named `<arm>-netns` (e.g. warm-pull-netns): the same, with every node in its own network namespace
  (separate machines on one switch: its own address, its p2pd with it), each one's upload capped at `--netns-mbit`
  (tc tbf; bench/benchlib/netns_hosts.py). Needs root and iproute2 (checked before anything runs).
This process stays on core 1. Both learners checkpoint every `learner.checkpoint_every` steps; the bench copies
each checkpoint as it appears and after each run evaluates every copy on the task's held-out prompts
(`swarmnode.local.evaluation.evaluate`, mean@`--eval-samples`), placed at the wall time of the step it holds. Per arm:
steps and steps/s, training reward first/last 10 %, held-out reward at four wall-clock marks, the time each repeat
first reaches a held-out target (the start plus `--target-fraction` of the mean gain of the local arm that gained
most, the baseline; none if no local arm gained: a target at or below the start means nothing), read three ways
(a mean of 3 evaluations must reach it: trailing, centered, and the centered curve's crossing interpolated between
evaluations, the least biased: the other two are late by seconds alike in every arm, which pulls speed-ups toward
1), for the swarm the learner's idle fraction (its `idle_seconds` counter:
seconds waiting for groups per second after its first step), and CPU ms per trained group on each core from the
first step on (python + p2pd, sampled from the processes' CPU times every 0.5 s; start-up left out). The speed-up of an arm is the baseline's median time to the
target over its own; the steps/s ratio is its median steps/s after the first step over the baseline's.

    python bench/swarm-speedup/swarm_value.py [--config tiny-cpu] [--seconds 120] [--repeats 3] [--arms local,swarm,swarm-p8]
        [--arm-set swarm-p8=learner.publish_every=8] [--set k=v ...] [--cores 0,1] [--out bench/swarm-speedup/results/swarm_value]
    python bench/swarm-speedup/swarm_value.py --profile DIR --seconds 60 --arms swarm   # cProfile every thread of every node
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT, core_pair, pin, write_results  # noqa: E402  (also puts this checkout's package first)
from benchlib.neighbour_load import start_neighbour  # noqa: E402
from benchlib.netns_hosts import in_namespace, limited_hosts, missing_for_namespaces  # noqa: E402
from swarmnode.learner.checkpoint import CHECKPOINT_NAME  # noqa: E402
from swarmnode.learner.steps_log import STEPS_FILE  # noqa: E402
from swarmnode.local.demo import read_steps  # noqa: E402
from swarmnode.local.swarm import (  # noqa: E402
    DemoRun,
    node_args,
    prepare_swarm,
    start_bootstrap,
    start_learners,
    start_samplers,
    start_swarm,
    wait_for_line,
)

LEARNER_CORE, SAMPLER_CORE = "0", "1"
# ways to read the time to the target off each repeat's held-out curve, by the suffix of their keys in the results:
# first_time_at's options and the words the tables use. The centered curve's crossing interpolated between
# evaluations is the least biased: the other two add seconds to every arm alike, which pulls speed-ups toward 1
ESTIMATORS = {
    "": ({}, "median time to target (first evaluation whose trailing mean of 3 reaches it)"),
    "_centered": ({"centered": True}, "the same with a centered mean of 3 evaluations"),
    "_interpolated": (
        {"centered": True, "interpolate": True},
        "the centered curve's crossing, interpolated between evaluations",
    ),
}


class SnapshotCopier(threading.Thread):
    """Copies `<dir>/checkpoint.pt` to `<dest>/<n>.pt` each time it changes (polled every `period` s)."""

    def __init__(self, directory: Path, dest: Path, period: float = 0.25):
        super().__init__(daemon=True)
        self.path, self.dest, self.period = directory / CHECKPOINT_NAME, dest, period
        self.dest.mkdir(parents=True, exist_ok=True)
        self.done = threading.Event()
        self.copied: list[tuple[Path, float]] = []  # (copy, wall time seen)

    def run(self) -> None:
        last = None
        while not self.done.wait(self.period):
            try:
                stamp = self.path.stat().st_mtime_ns
                if stamp != last:
                    copy = self.dest / f"{len(self.copied):04d}.pt"
                    shutil.copyfile(self.path, copy)
                    self.copied.append((copy, time.time()))
                    last = stamp
            except OSError:
                continue


def _sets_args(sets: list[str]) -> list[str]:
    return [a for s in sets for a in ("--set", s)]


def local_staleness(arm: str) -> int:
    """The fixed staleness of a local arm: `local-s<N>` N (`train-local --staleness N`), any other 0 (on-policy)."""
    if arm.startswith("local-s") and arm[len("local-s") :].isdigit():
        return int(arm[len("local-s") :])
    return 0


def busy_neighbour(arm: str) -> bool:
    """Whether a local arm runs beside a neighbour load on the samplers' core (`local-busy`, `local-busy-<x>`)."""
    return arm.split("-")[1:2] == ["busy"]


def namespaced(arm: str) -> bool:
    """Whether a swarm arm runs each node in its own network namespace with a capped upload (`<arm>-netns`)."""
    return not arm.startswith("local") and arm.endswith("-netns")


def run_local(
    seconds: float,
    config: str,
    sets: list[str],
    work: Path,
    profile: Path | None,
    staleness: int = 0,
    neighbour: bool = False,
) -> dict:
    """train-local pinned to the learner core (`--staleness staleness`; with `neighbour`, beside a generation
    load on the other core), checkpointing into `work`; its curve and snapshot copies."""
    nb = start_neighbour(config, sets, SAMPLER_CORE, work / "neighbour.err") if neighbour else None
    try:
        return _run_local(seconds, config, sets, work, profile, staleness)
    finally:
        if nb is not None:
            nb.kill()
            nb.wait()


def _run_local(seconds: float, config: str, sets: list[str], work: Path, profile: Path | None, staleness: int) -> dict:
    ckpt = work / "local-ckpt"
    copier = SnapshotCopier(ckpt, work / "local-snapshots")
    py = [str(ROOT / "bench" / "benchlib" / "profile_node.py"), str(profile / "local.prof")] if profile else []
    cmd = [
        *pin(LEARNER_CORE),
        sys.executable,
        "-P",
        *py,
        "-m",
        "swarmnode",
        "train-local",
        "-c",
        config,
        "--json",
        "--steps",
        "100000000",
        "--max-seconds",
        str(seconds),
        "--checkpoint-dir",
        str(ckpt),
        "--staleness",
        str(staleness),
        *_sets_args(sets),
    ]
    t0 = time.time()
    copier.start()
    out_path = work / "local.json"
    with open(out_path, "w") as out, open(work / "local.err", "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        cpu_series = []
        while proc.poll() is None and time.time() - t0 < seconds + 600:
            cpu_series.append((time.time(), {"local": total_cpu(proc.pid)}))
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    copier.done.set()
    copier.join()
    if proc.returncode != 0:
        raise SystemExit(f"train-local failed:\n{(work / 'local.err').read_text()[-3000:]}")
    curve = json.loads(out_path.read_text())["curve"]  # --max-seconds counts from the loop's start: clip it
    return {
        "t0": t0,
        "curve": [
            {"time": p["time"], "step": int(p["step"]), "reward_mean": p["reward_mean"]}
            for p in curve
            if p["time"] - t0 <= seconds
        ],
        "snapshots": copier.copied,
        "idle_seconds": None,
        "cpu_series": cpu_series,
    }


def prompts_per_step(config: str, sets: list[str]) -> int:
    from swarmnode.config import load_config

    return load_config(config, sets).learner.prompts_per_step


def run_swarm(
    seconds: float,
    config: str,
    sets: list[str],
    work: Path,
    profile: Path | None,
    samplers: int = 2,
    warm: bool = False,
    netns_mbit: float | None = None,
) -> dict:
    """The demo swarm with the learner pinned to core 0 and everything else to core 1, for `seconds` from the
    learner's launch. `warm`: the bootstrap and the samplers are started first and the clock starts when every
    sampler is ready (model loaded, waiting for a learner), as a learner joining a running swarm finds them;
    otherwise every process starts at once, at the clock's start. `netns_mbit`: every node in its own network
    namespace (its own address, its p2pd with it), each one's upload limited to that many Mbit/s."""
    with contextlib.ExitStack() as stack:
        run = DemoRun(work / "swarm")
        names = ["bootstrap", "learner", *[f"sampler{i}" for i in range(1, samplers + 1)]]
        hosts = dict(zip(names, stack.enter_context(limited_hosts(len(names), netns_mbit)))) if netns_mbit else {}
        run.host = lambda name: hosts[name][1] if hosts else None
        run.prefix = lambda name: [
            *(in_namespace(hosts[name][0]) if hosts else []),
            "taskset",
            "-c",
            LEARNER_CORE if name == "learner" else SAMPLER_CORE,
        ]
        return _run_swarm(run, seconds, config, sets, work, profile, samplers, warm)


def _run_swarm(
    run: DemoRun,
    seconds: float,
    config: str,
    sets: list[str],
    work: Path,
    profile: Path | None,
    samplers: int,
    warm: bool,
) -> dict:
    root = run.workdir
    root.mkdir(parents=True, exist_ok=True)
    if profile is not None:
        run.python_args = lambda name: [
            str(ROOT / "bench" / "benchlib" / "profile_node.py"),
            str(profile / f"{name}.prof"),
        ]
    copier = SnapshotCopier(root / "learner" / "checkpoints", work / "swarm-snapshots")
    sets = prepare_swarm(root, config, sets, say=lambda _msg: None)  # the model is cached: both arms load it
    quiet = lambda _msg: None  # noqa: E731
    try:
        if warm:
            args = node_args(config, sets, start_bootstrap(run, config, sets, quiet))
            started = start_samplers(run, args, samplers)
            for i in started:
                wait_for_line(next(p for p in run.procs if p.name == f"sampler{i}"), "sampler ready:", 180)
            t0 = time.time()
            copier.start()
            start_learners(run, args)
        else:
            t0 = time.time()
            copier.start()
            start_swarm(run, config, sets, quiet, samplers=samplers)
        cpu_series = []
        while time.time() - t0 < seconds:
            run.check_alive()
            cpu_series.append((time.time(), {proc.name: total_cpu(proc.popen.pid) for proc in run.procs}))
            time.sleep(0.5)
    finally:
        run.stop(grace=30.0)
        copier.done.set()
        if copier.is_alive():
            copier.join()
    rows = read_steps(root / "learner" / STEPS_FILE)
    return {
        "t0": t0,
        "curve": [
            {"time": r["time"], "step": int(r["step"]), "reward_mean": r["reward_mean"]}
            for r in rows
            if r["time"] - t0 <= seconds
        ],
        "snapshots": copier.copied,
        "cpu_series": cpu_series,
        # seconds the learner waited for groups between its first and last step
        "idle_seconds": rows[-1]["idle_seconds"] - rows[0]["idle_seconds"] if len(rows) > 1 else None,
    }


def total_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process and its children (a node's p2pd) have used so far."""
    import psutil

    try:
        proc = psutil.Process(pid)
        total = sum(proc.cpu_times()[:2])
        for child in proc.children(recursive=True):
            try:
                total += sum(child.cpu_times()[:2])
            except psutil.NoSuchProcess:
                continue
        return total
    except psutil.NoSuchProcess:
        return 0.0


def steady_cpu_per_group(result: dict, groups_per_step: int) -> dict | None:
    """CPU ms per trained group on each core from the arm's first step to its last CPU sample (start-up, imports
    and model loading left out): the learner core (learner or local process, with its p2pd) and the other core
    (bootstrap and samplers, with theirs)."""
    curve, series = result["curve"], result["cpu_series"]
    if len(curve) < 2 or not series:
        return None
    first = next(((t, c) for t, c in series if t >= curve[0]["time"]), None)
    if first is None or series[-1][0] <= first[0]:
        return None
    last = series[-1]
    steps = sum(1 for p in curve if first[0] <= p["time"] <= last[0])
    if not steps:
        return None
    core0 = {"learner", "local"}
    delta = {name: last[1].get(name, 0.0) - first[1].get(name, 0.0) for name in last[1]}
    per = 1e3 / (steps * groups_per_step)
    return {
        "learner_core": round(sum(v for k, v in delta.items() if k in core0) * per, 2),
        "sampler_core": round(sum(v for k, v in delta.items() if k not in core0) * per, 2),
        "steps_measured": steps,
    }


def evaluate_snapshots(
    snapshots: list[tuple[Path, float]],
    curve: list[dict],
    t0: float,
    config: str,
    sets: list[str],
    samples: int,
    max_evals: int,
) -> list[dict]:
    """Held-out reward of at most `max_evals` snapshots (evenly spaced, the last one always), each placed at the
    wall time of the step it holds."""
    import torch

    if len(snapshots) > max_evals:
        picks = {round(i * (len(snapshots) - 1) / max(1, max_evals - 1)) for i in range(max_evals)}
        snapshots = [snap for i, snap in enumerate(snapshots) if i in picks]

    from swarmnode.config import load_config
    from swarmnode.model.models import load_model, load_tokenizer
    from swarmnode.tasks import build_task

    torch.set_num_threads(1)  # this process is pinned to one core: more threads there only wait on each other
    cfg = load_config(config, sets)
    task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
    model = load_model(cfg.model, cfg.task, torch.device("cpu"))
    time_of = {p["step"]: p["time"] for p in curve}
    sc = cfg.sampler
    points = [{"step": 0, "t": 0.0, **_eval(model, tokenizer, task, sc, cfg, samples)}]  # the shared start
    for path, _seen in snapshots:
        state = torch.load(path, map_location="cpu", weights_only=True)
        step = int(state["step"])
        if step == 0:
            continue
        model.load_state_dict(state["model"])
        if step not in time_of:
            continue  # a step after the budget (the checkpoint written at shutdown)
        when = time_of[step]
        points.append({"step": step, "t": round(when - t0, 2), **_eval(model, tokenizer, task, sc, cfg, samples)})
    return points


def _eval(model, tokenizer, task, sc, cfg, samples: int) -> dict:
    from swarmnode.local.evaluation import evaluate

    out = evaluate(
        model,
        tokenizer,
        task,
        samples=samples,
        temperature=sc.temperature,
        max_new_tokens=sc.max_completion_length,
        max_prompt_tokens=sc.max_prompt_length,
        seed=cfg.task.seed,
    )
    return {"eval_reward": round(out["eval_reward"], 4)}


def first_time_at(
    points: list[dict], target: float, window: int = 3, centered: bool = False, interpolate: bool = False
) -> float | None:
    """Seconds from launch of the first held-out point whose trailing mean over `window` points (itself and the
    ones before it; fewer at the start) is at or above `target` (one lucky evaluation does not count).
    `centered`: the mean over the points around it instead (half before, half after), which does not lag the
    crossing by a window's worth of evaluations (a lag of equal seconds in every arm pulls speed-ups toward 1).
    `interpolate`: the time the smoothed curve crosses `target` on the straight line from the point before (when
    both hold a trained step) rather than the first point's time, which is late by up to one evaluation spacing
    (on average half of one: again equal seconds in every arm)."""
    smoothed = []
    for i, p in enumerate(points):
        lo = i - window // 2 if centered else i - window + 1
        smoothed.append(statistics.fmean(q["eval_reward"] for q in points[max(0, lo) : lo + window]))
        if p["step"] > 0 and smoothed[i] >= target:
            before = points[i - 1] if i else None
            if not interpolate or before is None or before["step"] == 0 or smoothed[i - 1] >= target:
                return p["t"]
            share = (target - smoothed[i - 1]) / (smoothed[i] - smoothed[i - 1])
            return round(before["t"] + share * (p["t"] - before["t"]), 2)
    return None


def heldout_at(points: list[dict], seconds: float) -> float | None:
    """The last held-out reward evaluated at or before `seconds` from launch."""
    before = [p["eval_reward"] for p in points if p["t"] <= seconds]
    return before[-1] if before else None


def summarise_arm(result: dict, points: list[dict], seconds: float, groups_per_step: int) -> dict:
    curve, t0 = result["curve"], result["t0"]
    first = curve[0]["time"] - t0 if curve else None
    active = (curve[-1]["time"] - curve[0]["time"]) if len(curve) > 1 else None
    out = {
        "steps": len(curve) and curve[-1]["step"],
        "steps_per_s": round(len(curve) / seconds, 2),
        "steps_per_s_after_first_step": round((len(curve) - 1) / active, 2) if active else None,
        "first_step_s": round(first, 2) if first is not None else None,
        "reward_first10pct": _tenth(curve, first=True),
        "reward_last10pct": _tenth(curve, first=False),
        "heldout": points,
        "heldout_final": points[-1]["eval_reward"] if points else None,
        "heldout_at": {str(int(t)): heldout_at(points, t) for t in _checkpoints(seconds)},
    }
    if (cost := steady_cpu_per_group(result, groups_per_step)) is not None:
        out["cpu_ms_per_group"] = cost
    if result.get("idle_seconds") is not None and active:
        out["learner_idle_fraction"] = round(result["idle_seconds"] / active, 3)
    return out


def _checkpoints(seconds: float) -> list[float]:
    """Four evenly spaced wall-clock marks up to the budget."""
    return [seconds * k / 4 for k in range(1, 5)]


def _tenth(curve: list[dict], first: bool) -> float | None:
    rewards = [p["reward_mean"] for p in curve]
    if not rewards:
        return None
    k = max(1, len(rewards) // 10)
    return round(statistics.fmean(rewards[:k] if first else rewards[-k:]), 4)


def print_profiles(profile: Path, top: int) -> None:
    import pstats

    for prof in sorted(profile.glob("*.prof")):
        print(f"\n===== {prof.stem} =====")
        pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="wall-clock budget of each arm, from launch")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--arms",
        default="local,swarm",
        help="comma-separated: local (on-policy), local-s<N> (train-local --staleness N) or "
        "local-<name> (on-policy, with its own --arm-set overrides), and swarm arms named swarm or "
        "swarm-<anything> (every node started at the clock's start) or warm or warm-<anything> (bootstrap "
        "and samplers already running: the clock starts at the learner's launch); an arm's own overrides "
        "come with --arm-set NAME=k=v",
    )
    ap.add_argument("--samplers", type=int, default=2, help="sampler processes of every swarm arm (all on core 1)")
    ap.add_argument(
        "--config",
        default="tiny-cpu",
        help="preset or YAML of every arm (tiny-digitmap: 129-token "
        "answers, where generation is a larger share of the single process's step)",
    )
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override for every arm")
    ap.add_argument(
        "--swarm-set",
        dest="swarm_sets",
        action="append",
        default=["sampler.max_groups_per_second=0"],
        help="config override for every swarm arm (default: the samplers' throttle off)",
    )
    ap.add_argument(
        "--arm-set",
        dest="arm_sets",
        action="append",
        default=[],
        help="NAME=k=v: a config override for one arm only (e.g. swarm-p8=learner.publish_every=8)",
    )
    ap.add_argument("--eval-samples", type=int, default=8, help="completions per held-out prompt")
    ap.add_argument("--max-evals", type=int, default=16, help="held-out evaluations per run at most")
    ap.add_argument("--target-fraction", type=float, default=0.75)
    ap.add_argument(
        "--cores",
        type=core_pair,
        default="0,1",
        help="LEARNER,SAMPLERS: the two cores to pin to (on a bigger machine, "
        "pick two that are not SMT siblings: /sys/devices/system/cpu/cpu0/topology/thread_siblings_list)",
    )
    ap.add_argument(
        "--netns-mbit",
        type=float,
        default=20.0,
        help="upload limit of every node of a swarm arm named "
        "<arm>-netns (e.g. warm-pull-netns), each node in its own network namespace (needs root)",
    )
    ap.add_argument("--profile", type=Path, default=None, help="cProfile every process into this directory")
    ap.add_argument("--out", type=Path, default=None, help="write <out>.json and <out>.md")
    args = ap.parse_args()
    arms = args.arms.split(",")
    if args.netns_mbit <= 0:
        ap.error(f"--netns-mbit {args.netns_mbit}: expected a positive upload limit")
    if any(namespaced(arm) for arm in arms) and (why := missing_for_namespaces()):
        ap.error(f"{','.join(arm for arm in arms if namespaced(arm))}: {why}")
    global LEARNER_CORE, SAMPLER_CORE
    LEARNER_CORE, SAMPLER_CORE = args.cores
    os.sched_setaffinity(0, {int(SAMPLER_CORE)})  # the snapshot copier and the evaluations stay off the learner's core
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    raw: dict[str, list[dict]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="swarm-value-") as tmp:
        for rep in range(args.repeats):
            for arm in arms:
                work = Path(tmp) / f"{arm}{rep}"
                work.mkdir()
                print(f"repeat {rep + 1}/{args.repeats}: {arm} ({args.seconds:.0f} s)", file=sys.stderr)
                own = [spec.split("=", 1)[1] for spec in args.arm_sets if spec.split("=", 1)[0] == arm]
                if arm.startswith("local"):
                    result = run_local(
                        args.seconds,
                        args.config,
                        [*args.sets, *own],
                        work,
                        args.profile,
                        local_staleness(arm),
                        busy_neighbour(arm),
                    )
                else:
                    result = run_swarm(
                        args.seconds,
                        args.config,
                        [*args.sets, *args.swarm_sets, *own],
                        work,
                        args.profile,
                        samplers=args.samplers,
                        warm=arm.startswith("warm"),
                        netns_mbit=args.netns_mbit if namespaced(arm) else None,
                    )
                points = evaluate_snapshots(
                    result["snapshots"],
                    result["curve"],
                    result["t0"],
                    args.config,
                    args.sets,
                    args.eval_samples,
                    args.max_evals,
                )
                raw[arm].append(summarise_arm(result, points, args.seconds, prompts_per_step(args.config, args.sets)))
        if args.profile:
            print_profiles(args.profile, 40)
    doc = build_doc(args, arms, raw, load)
    text = markdown(doc)
    print(text)
    write_results(args.out, doc, text)


def build_doc(args, arms: list[str], raw: dict[str, list[dict]], load: tuple) -> dict:
    doc = {
        "command": " ".join(["python bench/swarm-speedup/swarm_value.py", *sys.argv[1:]]),
        "config": args.config,
        "seconds": args.seconds,
        "repeats": args.repeats,
        "load_before": [round(x, 2) for x in load],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "sets": args.sets,
        "swarm_sets": args.swarm_sets,
        "arm_sets": args.arm_sets,
        "arms": raw,
    }
    locals_ = [arm for arm in arms if arm.startswith("local")] or arms[:1]
    first = raw[locals_[0]]
    start = first[0]["heldout"][0]["eval_reward"] if first and first[0]["heldout"] else 0.0

    def final(arm: str) -> float | None:  # mean over repeats of the mean of each repeat's last 3 evaluations
        finals = [statistics.fmean(p["eval_reward"] for p in r["heldout"][-3:]) for r in raw[arm] if r["heldout"]]
        return statistics.fmean(finals) if finals else None

    # the baseline is the local arm that learned most; the target a fraction of its held-out gain. A baseline
    # that gained nothing sets no target (a target at or below the start is reached by any first evaluation)
    finals = {arm: final(arm) for arm in locals_}
    base = max(locals_, key=lambda arm: -float("inf") if finals[arm] is None else finals[arm])
    gain = None if finals[base] is None else finals[base] - start
    target = round(start + args.target_fraction * gain, 4) if gain is not None and gain > 0 else None
    doc.update(
        baseline_arm=base,
        baseline_gain=None if gain is None else round(gain, 4),
        target=target,
        start_eval_reward=start,
    )
    if target is None:
        doc["target_note"] = f"no target: the baseline {base} gained {gain} held-out reward in {args.seconds:.0f} s"
    for name, (how, _) in ESTIMATORS.items():
        doc[f"time_to_target{name}_s"] = times = {
            arm: [first_time_at(r["heldout"], target, **how) if target is not None else None for r in raw[arm]]
            for arm in arms
        }
        med = {arm: _median(times[arm]) for arm in arms}
        doc[f"median_time_to_target{name}_s"] = med
        doc[f"speedup_time_to_target{name}"] = {
            arm: round(med[base] / med[arm], 3) for arm in arms if arm != base and med.get(base) and med.get(arm)
        }
        # against every other local arm too (e.g. local-busy: the single process with the other core as busy as
        # a swarm's)
        doc[f"speedup_over_other_locals{name}"] = {
            local: {
                arm: round(med[local] / med[arm], 3) for arm in arms if not arm.startswith("local") and med.get(arm)
            }
            for local in locals_
            if local != base and med.get(local)
        }
    rate = {arm: _median([r["steps_per_s_after_first_step"] for r in raw[arm]]) for arm in arms}
    doc["median_steps_per_s_after_first_step"] = rate
    doc["steps_per_s_ratio"] = {
        arm: round(rate[arm] / rate[base], 3) for arm in arms if arm != base and rate.get(base) and rate.get(arm)
    }
    return doc


def _median(values: list[float | None]) -> float | None:
    """Median with never-reached (None) counted as infinitely late; None if half or more never reached it."""
    ranked = sorted(float("inf") if v is None else v for v in values)
    if not ranked:
        return None
    m = statistics.median(ranked)
    return None if m == float("inf") else round(m, 2)


def markdown(doc: dict) -> str:
    lines = [
        f"# swarm value: `{doc['command']}`",
        "",
        f"load average (1/5/15 min) before {doc['load_before']}, after {doc['load_after']}; "
        f"{doc['seconds']:.0f} s per arm, {doc['repeats']} repeats; baseline {doc['baseline_arm']} (held-out gain "
        f"{doc['baseline_gain']}), held-out target {doc['target']} (start {doc['start_eval_reward']})"
        + (f"; {doc['target_note']}" if doc.get("target_note") else ""),
        "",
        "| arm | repeat | steps | steps/s | steps/s after 1st step | 1st step (s) | train reward first/last 10% "
        "| held-out final | time to target (s), first / interpolated | learner idle | CPU ms per trained group after the 1st step, learner core / other core |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, reps in doc["arms"].items():
        for i, r in enumerate(reps):
            lines.append(
                f"| {arm} | {i + 1} | {r['steps']} | {r['steps_per_s']} | {r['steps_per_s_after_first_step']} "
                f"| {r['first_step_s']} | {r['reward_first10pct']} / {r['reward_last10pct']} "
                f"| {r['heldout_final']} | {doc['time_to_target_s'][arm][i]} / "
                f"{doc['time_to_target_interpolated_s'][arm][i]} "
                f"| {r.get('learner_idle_fraction', '-')} "
                f"| {r.get('cpu_ms_per_group', {}).get('learner_core', '-')} / "
                f"{r.get('cpu_ms_per_group', {}).get('sampler_core', '-')} |"
            )
    marks = list(next(iter(doc["arms"].values()))[0]["heldout_at"]) if doc["arms"] else []
    lines += [
        "",
        "held-out reward at wall-clock seconds since launch (mean over repeats):",
        "",
        "| arm | " + " | ".join(f"{m} s" for m in marks) + " |",
        "|---|" + "---|" * len(marks),
    ]
    for arm, reps in doc["arms"].items():
        cells = []
        for m in marks:
            values = [r["heldout_at"][m] for r in reps if r["heldout_at"][m] is not None]
            cells.append(f"{statistics.fmean(values):.3f}" if values else "-")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    for name, (_, words) in ESTIMATORS.items():
        lines += [
            "",
            f"{words}: {doc.get(f'median_time_to_target{name}_s')}; speed-up (baseline / arm): "
            f"{doc.get(f'speedup_time_to_target{name}', 'n/a')}",
        ]
        lines += [
            f"- over {local} ({local} / arm): {ups}"
            for local, ups in doc.get(f"speedup_over_other_locals{name}", {}).items()
        ]
    lines += [
        "",
        f"median steps/s after the first step: {doc['median_steps_per_s_after_first_step']}; ratio to the "
        f"baseline: {doc['steps_per_s_ratio']}",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
