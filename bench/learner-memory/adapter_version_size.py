"""Bytes of an adapter-only weight version against a full-weight version of the same model, and the time of the
base weights' content hash (computed once when a node loads its model).

Qwen3 architectures written in code (bench/learner-memory/learner_memory.py's ARCHS: real dimensions and vocabulary, random
weights in `--dtype`, nothing downloaded). Both versions are really published into a `WeightStore` in a temporary
directory, as a learner publishes them: the full version is the model's state dict (what a full learner
publishes: every tensor under its name, the tied output head included), the adapter version peft's lora_A/lora_B
of `learner.lora.target_modules` at rank `--r`. Bytes = the flat buffer the chunks cut (what a sampler fetches)
plus the signed manifest.

    python bench/learner-memory/adapter_version_size.py --models 0.6B --r 16
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_memory import ARCHS, hf_config  # noqa: E402  (also puts this checkout's swarmnode first)

from swarmnode.config import load_config  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.learner.lora import adapter_spec, apply_lora  # noqa: E402
from swarmnode.model.adapters import adapter_state, weights_hash  # noqa: E402
from swarmnode.swarm.weights import WeightStore  # noqa: E402


def measure(model_name: str, r: int, dtype: torch.dtype) -> dict:
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(hf_config(model_name)).to(dtype)
    began = time.perf_counter()
    base_hash = weights_hash(model.state_dict())
    hash_s = time.perf_counter() - began
    params = sum(p.numel() for p in model.parameters())  # before the adapters are added
    settings = load_config(
        None, ["learner.lora.enabled=true", f"learner.lora.r={r}", f"learner.lora.alpha={2 * r}"]
    ).learner.lora
    me = Identity.generate()
    with tempfile.TemporaryDirectory() as tmp:
        store = WeightStore(tmp, "bench")
        full = store.publish(1, model.state_dict(), me)
        wrapped = apply_lora(model, settings)
        adapters = {k: v.to(dtype) for k, v in adapter_state(wrapped).items()}
        adapter = store.publish(2, adapters, me, parent_version=1, adapter=adapter_spec(settings, base_hash))
        full_bytes = full.total_bytes + len(full.encode())
        adapter_bytes = adapter.total_bytes + len(adapter.encode())
    return {
        "model": model_name,
        "r": r,
        "dtype": str(dtype).removeprefix("torch."),
        "params": params,
        "adapter_params": sum(v.numel() for v in adapters.values()),
        "full_bytes": full_bytes,
        "adapter_bytes": adapter_bytes,
        "ratio": adapter_bytes / full_bytes,
        "hash_s": hash_s,
        "targets": list(settings.target_modules),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["0.6B"], choices=sorted(ARCHS))
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = ap.parse_args()
    print("| model | r | dtype | full version | adapter version | adapter / full | adapter params | base hash |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models:
        m = measure(name, args.r, getattr(torch, args.dtype))
        print(
            f"| Qwen3-{m['model']} | {m['r']} | {m['dtype']} | {m['full_bytes']:,} B | {m['adapter_bytes']:,} B | "
            f"{100 * m['ratio']:.2f} % | {m['adapter_params']:,} of {m['params']:,} | {m['hash_s']:.1f} s |"
        )


if __name__ == "__main__":
    main()
