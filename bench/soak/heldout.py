"""The held-out reward of a learner's latest checkpoint (read only: the learner's directory is not touched),
printed as one JSON line. The soak runs it every few minutes in a subprocess of one torch thread.

    python bench/soak/heldout.py CHECKPOINT.pt [--config tiny-cpu] [--set k=v ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import config_args  # noqa: E402  (also puts this checkout's package first on sys.path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    config_args(ap)
    args = ap.parse_args()
    import torch

    from swarmnode.config import load_config
    from swarmnode.local.evaluation import evaluate
    from swarmnode.model.models import load_model, load_tokenizer
    from swarmnode.tasks import build_task

    torch.set_num_threads(1)
    cfg = load_config(args.config, args.sets)
    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    model = load_model(cfg.model, cfg.task)
    if state is not None:
        model.load_state_dict(state["model"])
    task = build_task(cfg.task)
    result = evaluate(
        model,
        load_tokenizer(cfg.model, cfg.task),
        task,
        samples=16,
        temperature=cfg.sampler.temperature,
        max_new_tokens=cfg.sampler.max_completion_length,
    )
    print(json.dumps({"version": int(state["version"]), "step": int(state["step"]), **result}))


if __name__ == "__main__":
    main()
