"""A learner step's fixed cost and per-token cost: time = fixed + per_token x tokens, fitted over steps whose
completions are 1, 10 and 100 tokens long; the host synchronisations per step; a profile of one step; and the
same for an older tree (`--old`), as ratios.

Groups are made once, synthetically, so that every step trains exactly the same rows: each of `--prompts` task
prompts (the learner's own tokenisation) gets `--rows` completions of exactly L random tokens with made-up
behaviour log-probs; the task's reward is replaced by a hash of the decoded completion (so that every group
carries signal; everything else is the real learner: validation, decoding, rewards recomputed, GEPO, AdamW, a
version published per step from the node's background publisher, whose publish call does nothing). Spot checks
are off (`trust.verify_fraction=0`) so that every step does the same work. Per length, one `LearnerLoop`
steps `--repeats` times after two warm-up steps; the median time is reported (wall time on a GPU, the step
thread's CPU time on CPU).

    python bench/learner-fixed-cost/fixed_cost.py [--model tiny|smollm2] [--lengths 1,10,100] [--prompts 8]
        [--rows 8] [--repeats 5] [--device cpu|cuda] [--dtype float32|bfloat16] [--threads 1]
        [--old GIT_REF_OR_DIR] [--rounds 2] [--profile L] [--set key=value ...] [--json PATH]

With `--old`, the measurement runs in subprocesses, alternating between the old tree (a git ref is exported
with `git archive` into a temporary directory) and this one for `--rounds` rounds; each figure is the median
over rounds and the table gives new/old. `--profile L` prints a cProfile of `--repeats` steps at length L
(and, on CUDA, torch.profiler's table of the same steps) instead.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = {"tiny": "tiny-cpu", "smollm2": "smollm2-135m"}


# ---- inside the tree under test --------------------------------------------------------------------------
class HashRewardTask:
    """The configured task with its reward replaced by a hash of the completion text (signal in every group)."""

    def __init__(self, task):
        self._task = task

    def __getattr__(self, name):
        return getattr(self._task, name)

    def reward(self, prompt, completion_text: str) -> float:
        return float(zlib.crc32(completion_text.encode()) % 2)

    def score(self, prompt, texts: list[str]):
        """The learner's group scoring (trees with `Task.score`), through the hashed reward."""
        from swarmnode.tasks.base import Scored

        return Scored([self.reward(prompt, t) for t in texts])


def readback_counter():
    """A torch function mode counting tensor -> Python readbacks and data-dependent shapes (each one a host
    synchronisation when the tensor is on a GPU; on CPU an upper bound of them). The optimiser's own are left
    out: AdamW keeps its step counters on the host by design."""
    import torch
    from torch.overrides import TorchFunctionMode

    names = {
        "item",
        "__float__",
        "__int__",
        "__bool__",
        "tolist",
        "cpu",
        "numpy",
        "nonzero",
        "unique",
        "masked_select",
        "argwhere",
    }

    class Readbacks(TorchFunctionMode):
        count = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if (name in names or (name == "__getitem__" and _bool_index(args))) and not _in_optimizer():
                Readbacks.count += 1
            return func(*args, **(kwargs or {}))

    def _in_optimizer() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if "torch/optim/" in frame.f_code.co_filename.replace(os.sep, "/"):
                return True
            frame = frame.f_back
        return False

    def _bool_index(args) -> bool:
        index = args[1] if len(args) > 1 else None
        parts = index if isinstance(index, tuple) else (index,)
        return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)

    return Readbacks


def build(model_name: str, device: str, dtype: str, prompts: int, sets: list[str]):
    """(cfg, model, tokenizer, task) for the bench."""
    from swarmnode.config import NodeConfig, load_config
    from swarmnode.model.models import load_model, load_tokenizer
    from swarmnode.tasks import build_task

    checks = "trust" if "trust" in NodeConfig.model_fields else "learner"  # older trees kept it under learner.
    cfg = load_config(
        MODELS[model_name],
        [
            "sync.max_staleness=1000000",
            f"{checks}.verify_fraction=0",
            "learner.checkpoint_every=1000000",
            f"model.dtype={dtype}",
            f"learner.prompts_per_step={prompts}",
            *sets,
        ],
    )
    task = HashRewardTask(build_task(cfg.task))
    tokenizer = load_tokenizer(cfg.model, cfg.task)
    model = load_model(cfg.model, cfg.task, device)
    return cfg, model, tokenizer, task


def make_groups(cfg, model, tokenizer, task, prompts: int, rows: int, length: int, seed: int = 0) -> list:
    """`prompts` signed groups of `rows` completions of exactly `length` random tokens, each with signal."""
    import random

    from swarmnode.identity import Identity
    from swarmnode.learner.rows import GroupRows
    from swarmnode.protocol.rollout import RolloutGroup

    rng = random.Random(seed)
    vocab = min(model.config.vocab_size, len(tokenizer))
    encoder = GroupRows(task, tokenizer, cfg.sampler.max_prompt_length, rejected={})
    identity, groups = Identity.generate(), []
    for prompt in task.sample(prompts, rng):
        while True:
            completions = [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(rows)]
            texts = tokenizer.batch_decode(completions, skip_special_tokens=True)
            rewards = [task.reward(prompt, t) for t in texts]
            if len(set(rewards)) > 1:
                break
        logprobs = [[-rng.uniform(0.5, 3.0) for _ in range(length)] for _ in range(rows)]
        groups.append(
            RolloutGroup.create(
                identity=identity,
                run_id=cfg.run_id,
                prompt_id=prompt.prompt_id,
                prompt_tokens=encoder.prompt_tokens(prompt.text),
                completions=completions,
                logprobs=logprobs,
                temperature=cfg.sampler.temperature,
                rewards=rewards,
                policy_version=0,
                lineage="",
            )
        )
    return groups


def new_learner(cfg, model, tokenizer, task):
    """A learner like the node's (background publisher), whose publish does nothing."""
    from swarmnode.learner.buffer import ReplayBuffer
    from swarmnode.learner.loop import LearnerLoop

    return LearnerLoop(
        model, tokenizer, task, cfg, ReplayBuffer.from_config(cfg), publish=lambda *a: None, publish_in_background=True
    )


def one_step(learner, groups, device: str) -> float:
    """Seconds of one `learner.step()` over `groups` (a fresh buffer holding exactly them): wall time on a GPU,
    the step thread's CPU time on CPU (robust to other processes on a loaded machine; torch runs on this thread
    with `--threads 1`)."""
    import torch

    from swarmnode.learner.buffer import ReplayBuffer

    learner.buffer = ReplayBuffer.from_config(learner.cfg, version=learner.version)
    for g in groups:
        learner.buffer.add(g)
    clock = time.perf_counter if device.startswith("cuda") else time.thread_time
    began = clock()
    diag = learner.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = clock() - began
    if not (diag and diag.get("trained")):
        raise SystemExit(f"the step did not train ({diag})")
    return elapsed


def count_syncs(learner, groups, device: str) -> int:
    """Host synchronisations of one step: exact on CUDA (torch's sync debug mode), readbacks on CPU."""
    import torch

    if device.startswith("cuda"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                one_step(learner, groups, "cpu")
            finally:
                torch.cuda.set_sync_debug_mode(0)
        return sum("synchroniz" in str(w.message) for w in caught)
    Readbacks = readback_counter()
    Readbacks.count = 0
    with Readbacks():
        one_step(learner, groups, device)
    return Readbacks.count


def measure(args) -> dict:
    """Per length: rows, tokens per step (prompt + completion, unpadded), median step seconds, syncs per step."""
    import copy

    import torch

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    cfg, base, tokenizer, task = build(args.model, args.device, args.dtype, args.prompts, args.sets)
    out = {}
    for length in args.lengths:
        groups = make_groups(cfg, base, tokenizer, task, args.prompts, args.rows, length)
        learner = new_learner(cfg, copy.deepcopy(base), tokenizer, task)
        times = [one_step(learner, groups, args.device) for _ in range(args.repeats + 2)][2:]
        syncs = count_syncs(learner, groups, args.device)
        learner.flush_publish(30)
        tokens = sum(len(g.prompt_tokens) + len(c) for g in groups for c in g.completions)
        out[str(length)] = {
            "rows": args.prompts * args.rows,
            "tokens": tokens,
            "median_s": statistics.median(times),
            "times_s": [round(t, 5) for t in times],
            "syncs": syncs,
        }
    return out


def profile(args) -> None:
    """cProfile (and on CUDA torch.profiler) of `--repeats` steps at length `--profile`."""
    import copy
    import cProfile
    import pstats

    import torch

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    cfg, base, tokenizer, task = build(args.model, args.device, args.dtype, args.prompts, args.sets)
    groups = make_groups(cfg, base, tokenizer, task, args.prompts, args.rows, args.profile)
    learner = new_learner(cfg, copy.deepcopy(base), tokenizer, task)
    for _ in range(2):
        one_step(learner, groups, args.device)
    prof = cProfile.Profile(time.perf_counter if args.device.startswith("cuda") else time.thread_time)
    prof.enable()
    for _ in range(args.repeats):
        one_step(learner, groups, args.device)
    prof.disable()
    stats = pstats.Stats(prof).strip_dirs()
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(30)
    if args.device.startswith("cuda"):
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        ) as tp:
            for _ in range(args.repeats):
                one_step(learner, groups, args.device)
        print(tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    learner.flush_publish(30)


# ---- the driver ------------------------------------------------------------------------------------------
def fit(points: dict) -> dict:
    """Least squares of median step time against tokens per step: fixed seconds and microseconds per token."""
    xs = [p["tokens"] for p in points.values()]
    ys = [p["median_s"] for p in points.values()]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return {"fixed_s": my - slope * mx, "per_token_us": slope * 1e6}


def export_tree(ref: str) -> Path:
    """A directory holding the tree `ref`: itself when it is a directory, else `git archive ref` unpacked."""
    if Path(ref).is_dir():
        return Path(ref).resolve()
    target = Path(tempfile.mkdtemp(prefix="fixed-cost-old-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"--old {ref}: neither a directory nor a git ref here ({archive.stderr.decode().strip()})")
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def run_tree(tree: Path, argv: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(
        [sys.executable, "-P", __file__, *argv, "--inner"],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"the run in {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(args, argv: list[str]) -> dict:
    """Old and new tree alternately for `--rounds` rounds; per length the median over rounds."""
    trees = {"old": export_tree(args.old), "new": ROOT}
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            runs[name].append(run_tree(tree, argv))
    doc = {}
    for name, results in runs.items():
        doc[name] = {
            length: {
                **results[0][length],
                "median_s": statistics.median(r[length]["median_s"] for r in results),
                "times_s": [t for r in results for t in r[length]["times_s"]],
            }
            for length in results[0]
        }
    return doc


def report(doc: dict) -> None:
    names = list(doc)
    fits = {n: fit(doc[n]) for n in names}
    head = f"{'L':>5} {'rows':>5} {'tokens':>7}" + "".join(f" {n + ' s':>10} {n + ' syncs':>11}" for n in names)
    print(head + ("   new/old" if len(names) == 2 else ""))
    for length in doc[names[0]]:
        p = {n: doc[n][length] for n in names}
        line = f"{length:>5} {p[names[0]]['rows']:>5} {p[names[0]]['tokens']:>7}"
        line += "".join(f" {p[n]['median_s']:>10.4f} {p[n]['syncs']:>11}" for n in names)
        if len(names) == 2:
            line += f"   {p['new']['median_s'] / p['old']['median_s']:.3f}"
        print(line)
    for n in names:
        f = fits[n]
        print(f"{n}: fixed {f['fixed_s'] * 1e3:.1f} ms per step + {f['per_token_us']:.1f} us per token")
    if len(names) == 2 and fits["old"]["fixed_s"] > 0:
        print(f"fixed cost new/old: {fits['new']['fixed_s'] / fits['old']['fixed_s']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="tiny")
    ap.add_argument("--lengths", default="1,10,100", help="completion tokens per row, comma-separated")
    ap.add_argument("--prompts", type=int, default=8, help="groups per step")
    ap.add_argument("--rows", type=int, default=8, help="completions per group")
    ap.add_argument("--repeats", type=int, default=5, help="timed steps per length (after two warm-up steps)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override key=value")
    ap.add_argument("--old", default=None, help="git ref or directory of the tree to compare with")
    ap.add_argument("--rounds", type=int, default=2, help="with --old: alternating rounds per tree")
    ap.add_argument("--profile", type=int, default=None, metavar="L", help="profile steps at length L instead")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    args = ap.parse_args()
    try:
        args.lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        ap.error(f"--lengths {args.lengths!r}: expected comma-separated integers")
    if min(args.lengths) < 1 or args.prompts < 1 or args.rows < 2 or args.repeats < 1:
        ap.error("lengths and --prompts must be >= 1, --rows >= 2, --repeats >= 1")
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            ap.error(f"--device {args.device}: torch sees no CUDA device")
    if args.profile is not None:
        profile(args)
        return
    if args.inner:
        print(json.dumps(measure(args)))
        return
    if args.old:
        inner_argv = [a for a in _without(argv, "--old", "--json", "--rounds")]
        doc = compare(args, inner_argv)
    else:
        doc = {"new": measure(args)}
    report(doc)
    meta = {
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "prompts": args.prompts,
        "rows": args.rows,
        "repeats": args.repeats,
        "threads": args.threads,
        "old": args.old,
        "load": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if args.json:
        args.json.write_text(
            json.dumps({"meta": meta, "results": doc, "fit": {n: fit(d) for n, d in doc.items()}}, indent=1)
        )


def _without(argv: list[str], *options: str) -> list[str]:
    """`argv` less the given options and their values (`--opt value` and `--opt=value`)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in options:
            skip = True
            continue
        if any(a.startswith(o + "=") for o in options):
            continue
        out.append(a)
    return out


if __name__ == "__main__":
    main()
