"""Adapter-only versions in the sampler engines (the tensors and `AdapterSpec` of `swarmnode.model.adapters`).

- `PeftAdapter` (transformers engine): peft's LoRA layers injected into the engine's model in place, its base
  weights untouched, and each version's adapter tensors loaded into them; the engine then computes what the
  learner's peft model computes. `remove` takes the layers out again (before a full-weight version).
- `VLLMAdapter` (vLLM engine): the adapter version a vLLM engine holds, as a `LoRARequest` with its own id and
  peft adapter directory (`write_adapter_dir`: adapter_config.json and adapter_model.safetensors, which vLLM's
  LoRA support loads by path); the previous version's is removed from the engine and deleted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from swarmnode.model.adapters import load_adapter_state, peft_config
from swarmnode.protocol.manifest import AdapterSpec

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts


class PeftAdapter:
    """LoRA layers for `spec` in `model` (in place); `load` puts a version's adapter tensors in them."""

    def __init__(self, model: torch.nn.Module, spec: AdapterSpec):
        from peft import LoraConfig, get_peft_model

        config = {k: v for k, v in peft_config(spec).items() if k != "peft_type"}
        self.spec = spec
        self.wrapper = get_peft_model(model, LoraConfig(**config))
        self.wrapper.eval()

    @torch.no_grad()
    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Copy adapter tensors (peft's names) into the layers; a missing or unknown one is a ValueError."""
        load_adapter_state(self.wrapper, state)

    def remove(self) -> torch.nn.Module:
        """Take the LoRA layers out (nothing merged); the model as it was before."""
        return self.wrapper.unload()


def write_adapter_dir(directory: Path, state: dict[str, torch.Tensor], spec: AdapterSpec) -> Path:
    """Write `state` as a peft adapter directory (created) that vLLM's LoRA loader reads; returns it."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "adapter_config.json").write_text(json.dumps(peft_config(spec)))
    save_file(
        {k: v.detach().to("cpu").contiguous() for k, v in state.items()}, str(directory / "adapter_model.safetensors")
    )
    return directory


def vllm_lora_rank(r: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds adapters of rank `r` (at most 512)."""
    return min(x for x in VLLM_LORA_RANKS if x >= min(r, VLLM_LORA_RANKS[-1]))


class VLLMAdapter:
    """The adapter version a vLLM engine (started with `enable_lora`, `max_rank`; None: without) holds."""

    def __init__(self, root: Path, max_rank: int | None):
        self.root, self.max_rank = root, max_rank
        self.request: Any = None  # the LoRARequest passed to generate (None: the plain weights)

    def load(self, llm: Any, state: dict[str, torch.Tensor], spec: AdapterSpec) -> None:
        """Make `state` the adapter the next batches use; ValueError when the engine cannot take it."""
        from vllm.lora.request import LoRARequest

        if self.max_rank is None or spec.r > self.max_rank:
            started = "without LoRA" if self.max_rank is None else f"for rank <= {self.max_rank}"
            raise ValueError(
                f"adapter of rank {spec.r}: this vLLM engine was started {started} (set "
                f"learner.lora.enabled=true and learner.lora.r >= {spec.r} in the sampler's config)"
            )
        lora_id = self.request.lora_int_id + 1 if self.request is not None else 1
        path = write_adapter_dir(self.root / f"lora-{lora_id}", state, spec)
        self.drop(llm)
        self.request = LoRARequest(f"adapter-{lora_id}", lora_id, str(path))

    def drop(self, llm: Any) -> None:
        """Forget the adapter held: vLLM unloads it, its directory goes."""
        if self.request is None:
            return
        try:
            llm.llm_engine.remove_lora(self.request.lora_int_id)
        except Exception:  # never loaded (no batch ran with it), or an engine without the hook
            pass
        shutil.rmtree(self.request.lora_path, ignore_errors=True)
        self.request = None
