"""A sampler's load without a swarm: generate the config's rollout batches forever (until killed).

`bench/swarm-speedup/swarm_value.py` runs it on the samplers' core beside a `local-busy` arm, so the single-process trainer
shares its machine with the same kind of work the swarm's learner shares it with (on a small VM the two cores
share caches, memory bandwidth or a physical core, and a busy neighbour slows each core).

    taskset -c 1 python bench/benchlib/neighbour_load.py --config tiny-digitmap [--set k=v ...]
"""

from __future__ import annotations

import argparse
import random
import select
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]  # this checkout's package; benchlib
from benchlib import config_args, pin  # noqa: E402

READY = "neighbour ready"
START_TIMEOUT_S = 180.0  # model load (the tiny model is cached by then) and imports


def start_neighbour(config: str, sets: list[str], core: str, log: Path) -> subprocess.Popen:
    """This script pinned to `core` (its stderr in `log`), returned once it generates; SystemExit with its log's
    tail if it dies or is not ready within START_TIMEOUT_S."""
    cmd = [
        *pin(core),
        sys.executable,
        str(Path(__file__).resolve()),
        "--config",
        config,
        *[a for one in sets for a in ("--set", one)],
    ]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
    if not ready or READY not in proc.stdout.readline():
        proc.kill()
        proc.wait()
        raise SystemExit(f"the neighbour load did not start:\n{log.read_text()[-3000:]}")
    return proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config_args(ap, "tiny-cpu")
    args = ap.parse_args()

    import torch

    from swarmnode.allocator import keep_freed_memory
    from swarmnode.config import load_config
    from swarmnode.model.models import load_model, load_tokenizer
    from swarmnode.sampler.engines import HFEngine
    from swarmnode.tasks import build_task

    keep_freed_memory()  # as every swarmnode command does
    torch.set_num_threads(1)
    cfg = load_config(args.config, args.sets)
    sc = cfg.sampler
    task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
    engine = HFEngine(load_model(cfg.model, cfg.task, torch.device("cpu")), tokenizer, sc.max_prompt_length, 0)
    rng = random.Random(cfg.task.seed)
    print(READY, flush=True)
    while True:
        prompts = task.sample(sc.prompts_per_batch, rng)
        engine.generate([p.text for p in prompts], sc.num_generations, sc.temperature, sc.max_completion_length)


if __name__ == "__main__":
    main()
