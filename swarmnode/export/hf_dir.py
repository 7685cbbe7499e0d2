"""A version as a Hugging Face directory: what `AutoModelForCausalLM.from_pretrained` (and vLLM) loads, or, for a
LoRA run, a PEFT adapter directory (`PeftModel.from_pretrained`, vLLM's `--lora-modules`).

A model directory holds the base model's `config.json` (dtype set to the version's), the weights as safetensors
(sharded at 5 GB, as transformers does), the base model's tokenizer with its chat template when it has one, and a
`generation_config.json` with the run's sampling settings (temperature, top_p, completion length). An adapter
directory holds `adapter_config.json` (rank, alpha, target modules, the base model), `adapter_model.safetensors`
under peft's names, and the tokenizer. `merged_state` folds an adapter version into its base (W + alpha/r B A),
which then writes as a model directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from swarmnode.config import ModelConfig, SamplerConfig
from swarmnode.export.errors import ExportError
from swarmnode.model.adapters import peft_config, split_adapter_name, weights_hash
from swarmnode.protocol.manifest import AdapterSpec

MAX_SHARD = "5GB"


def version_dtype(state: dict[str, torch.Tensor]) -> torch.dtype:
    """The dtype of a version's floating-point tensors (the model's dtype as the learner published it)."""
    return next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)


def write_model(out: Path, base_dir: str, state: dict[str, torch.Tensor], mc: ModelConfig, sc: SamplerConfig) -> None:
    """Write the full-weight `state` (the base model's tensor names) as a model directory in `out` (`mc`: the run's
    model, `sc`: its sampling settings)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base_dir, trust_remote_code=mc.trust_remote_code)
    dtype = version_dtype(state)
    with torch.device("meta"):  # no weights allocated: the version's tensors are assigned
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=mc.trust_remote_code)
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise ExportError(f"the version does not fit {mc.name}'s architecture ({str(exc).splitlines()[0]})") from None
    model.tie_weights()
    model.config.dtype = dtype
    model.save_pretrained(out, max_shard_size=MAX_SHARD)
    write_tokenizer(out, base_dir, mc)
    write_generation_config(out, base_dir, sc)


def write_adapter(
    out: Path, base_dir: str, state: dict[str, torch.Tensor], spec: AdapterSpec, mc: ModelConfig, sc: SamplerConfig
) -> None:
    """Write LoRA adapter tensors (peft's names) and their config as a PEFT adapter directory in `out`."""
    from safetensors.torch import save_file

    config = {**peft_config(spec), "base_model_name_or_path": base_reference(mc, base_dir), "inference_mode": True}
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    save_file(
        {k: v.contiguous().clone() for k, v in state.items()}, out / "adapter_model.safetensors", {"format": "pt"}
    )
    write_tokenizer(out, base_dir, mc)
    write_generation_config(out, base_dir, sc)


def base_reference(mc: ModelConfig, base_dir: str) -> str:
    """How a directory names its base model: the hub id when the run used one, else the local directory."""
    return mc.name if base_dir == mc.name else str(Path(base_dir).absolute())


def load_base_state(base_dir: str, mc: ModelConfig) -> dict[str, torch.Tensor]:
    """The base model's state dict as the learner loads it (its dtype), for merging and its content hash."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        base_dir, dtype=getattr(torch, mc.dtype), trust_remote_code=mc.trust_remote_code
    )
    return model.state_dict()


def check_base(base: dict[str, torch.Tensor], spec: AdapterSpec, name: str) -> None:
    """ExportError unless `base` is the base weights the adapter version names (by content hash)."""
    if weights_hash(base) != spec.base_hash:
        raise ExportError(
            f"the adapters are for other base weights than this machine's {name} (base hash "
            f"{spec.base_hash.hex()[:16]}, here {weights_hash(base).hex()[:16]}): get the run's base model"
        )


def merged_state(base: dict[str, torch.Tensor], adapters: dict[str, torch.Tensor], spec: AdapterSpec):
    """`base` with every adapted linear's weight W + alpha / r * B A (computed in fp32, stored in W's dtype)."""
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in adapters.items():
        parsed = split_adapter_name(name)
        if parsed is None:
            raise ExportError(f"adapter tensor {name!r} is not a LoRA tensor")
        halves.setdefault(parsed[0], {})[parsed[1]] = tensor
    out = dict(base)
    for module, pair in halves.items():
        key = f"{module}.weight"
        if key not in base or set(pair) != {"A", "B"}:
            raise ExportError(f"adapter module {module!r} does not fit the base model")
        w = base[key]
        delta = spec.scale * (pair["B"].float() @ pair["A"].float())
        out[key] = (w.float() + delta).to(w.dtype)
    return out


def write_tokenizer(out: Path, base_dir: str, mc: ModelConfig) -> None:
    """The base model's tokenizer files, its chat template included when it has one."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir, trust_remote_code=mc.trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.save_pretrained(out)


def write_generation_config(out: Path, base_dir: str, sc: SamplerConfig) -> None:
    """`generation_config.json`: the base model's, with the run's sampling settings."""
    from transformers import AutoConfig, GenerationConfig

    try:
        gen = GenerationConfig.from_pretrained(base_dir)
    except OSError:
        gen = GenerationConfig.from_model_config(AutoConfig.from_pretrained(base_dir))
    gen.do_sample, gen.temperature, gen.top_p = True, sc.temperature, sc.top_p
    gen.max_new_tokens = sc.max_completion_length
    gen.save_pretrained(out)


def has_chat_template(out: Path) -> bool:
    """Whether a written directory's tokenizer carries a chat template."""
    if (out / "chat_template.jinja").is_file() or (out / "chat_template.json").is_file():
        return True
    try:
        return bool(json.loads((out / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError):
        return False
