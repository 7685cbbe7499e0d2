"""Adapter-only versions in the sampler engines (the tensors and `AdapterSpec` of `swarmnode.adapters`).

- `PeftAdapter` (transformers engine): peft's LoRA layers injected into the engine's model in place, its base
  weights untouched, and each version's adapter tensors loaded into them; the engine then computes what the
  learner's peft model computes. `remove` takes the layers out again (before a full-weight version).
- `write_adapter_dir`: a version's adapters as a peft adapter directory (adapter_config.json and
  adapter_model.safetensors), which vLLM's LoRA support loads by path (`LoRARequest`).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from swarmnode.adapters import load_adapter_state, peft_config
from swarmnode.protocol.manifest import AdapterSpec


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
    save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()},
              str(directory / "adapter_model.safetensors"))
    return directory
