"""LoRA adapters as weight versions: the base model's content hash, and how peft's adapter tensors fit a model.

An adapter-only version (`protocol.manifest.AdapterSpec`) names its base by `weights_hash`: sha256 over the base
model's state dict as loaded (each tensor's name, dtype, shape and raw bytes, in name order; a tied alias counted
once), computed once when a node loads its model. Its tensors are peft's: `base_model.model.<module>.lora_A.weight`
[r, in] and `base_model.model.<module>.lora_B.weight` [out, r] for every adapted linear `<module>` (its weight is
[out, in]); the update is W + alpha / r * B A. `check_adapter_tensors` says whether a version's tensors fit a
model before anything is fetched; `peft_config` is the adapter_config.json peft and vLLM's LoRA loader read;
`adapter_state` / `load_adapter_state` move them out of and into a peft-wrapped model.
"""

from __future__ import annotations

import hashlib

import torch

from swarmnode.protocol.manifest import AdapterSpec, dtype_fits

PEFT_PREFIX = "base_model.model."
_SUFFIXES = {".lora_A.weight": "A", ".lora_B.weight": "B"}

TensorShapes = dict[str, tuple[str, tuple[int, ...]]]  # name -> (dtype name, shape)


def weights_hash(state: dict[str, torch.Tensor]) -> bytes:
    """sha256 of a state dict's names, dtypes, shapes and bytes, in name order; a tensor sharing storage with an
    earlier one (tied embeddings) is hashed once. The same weights loaded anywhere give the same hash."""
    digest = hashlib.sha256()
    seen: set[tuple] = set()
    for name in sorted(state):
        tensor = state[name].detach()
        storage = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.dtype, tuple(tensor.shape))
        if tensor.numel() and storage in seen:
            continue
        seen.add(storage)
        head = f"{name}\0{str(tensor.dtype).removeprefix('torch.')}\0{list(tensor.shape)}\0"
        digest.update(head.encode())
        flat = tensor.to("cpu").contiguous().reshape(-1)
        if flat.numel():
            digest.update(flat.view(torch.uint8).numpy().data)
    return digest.digest()


def split_adapter_name(name: str) -> tuple[str, str] | None:
    """(`<module>`, "A" or "B") of a peft adapter tensor name, or None when `name` is not one."""
    if not name.startswith(PEFT_PREFIX):
        return None
    for suffix, which in _SUFFIXES.items():
        if name.endswith(suffix):
            return name[len(PEFT_PREFIX) : -len(suffix)], which
    return None


def is_target(module: str, spec: AdapterSpec) -> bool:
    """Whether `module` is one the spec adapts (peft's rule: its name, or its last dotted parts, is a target)."""
    return any(module == t or module.endswith("." + t) for t in spec.target_modules)


def check_adapter_tensors(tensors: TensorShapes, spec: AdapterSpec, model: TensorShapes) -> None:
    """Raise ValueError unless `tensors` are an A and a B for each of some adapted linear modules of `model`, of
    rank `spec.r` and the module's dtype (or another floating one: `protocol.manifest.dtype_fits`)."""
    halves: dict[str, set[str]] = {}
    for name, (dtype, shape) in tensors.items():
        parsed = split_adapter_name(name)
        if parsed is None:
            raise ValueError(f"tensor {name!r} is not a LoRA adapter tensor")
        module, which = parsed
        if not is_target(module, spec):
            raise ValueError(f"tensor {name!r}: module {module!r} is not one of {list(spec.target_modules)}")
        base = model.get(f"{module}.weight")
        if base is None or len(base[1]) != 2:
            raise ValueError(f"tensor {name!r}: this node's model has no linear module {module!r}")
        out_features, in_features = base[1]
        want = (spec.r, in_features) if which == "A" else (out_features, spec.r)
        if not dtype_fits(dtype, base[0]) or tuple(shape) != want:
            raise ValueError(f"tensor {name!r} is {dtype} {list(shape)}, expected {base[0]} {list(want)}")
        halves.setdefault(module, set()).add(which)
    unpaired = sorted(m for m, h in halves.items() if h != {"A", "B"})
    if unpaired:
        raise ValueError(f"module {unpaired[0]!r} has only one of lora_A and lora_B")


def peft_config(spec: AdapterSpec) -> dict:
    """The adapter_config.json of `spec` (what peft's LoraConfig and vLLM's LoRA loader read)."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": spec.r,
        "lora_alpha": spec.alpha,
        "target_modules": list(spec.target_modules),
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
    }


def adapter_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter tensors of a peft-wrapped model under peft's names (detached, on their device)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach() for k, v in get_peft_model_state_dict(model).items()}


def load_adapter_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load adapter tensors saved by `adapter_state` into a peft-wrapped model; a missing or extra tensor is a
    ValueError naming it."""
    from peft import set_peft_model_state_dict

    expected = set(adapter_state(model))
    if set(state) != expected:
        missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
        raise ValueError(f"adapter state does not fit this model (missing {missing[:3]}, unexpected {extra[:3]})")
    set_peft_model_state_dict(model, state)
