"""What this machine can do for a run: probe the hardware, estimate the model's memory needs, pick a role.

`probe_hardware()` reads GPUs (torch.cuda: name, total/free memory), CPU count and RAM (psutil).
`estimate_memory(cfg)` sizes inference and training of the configured model from its architecture (parameter
count, dtype, layers, KV heads) and the sampler/learner settings (training: `learner.memory`, which covers full
and LoRA training, checkpointing, the micro-batch's tokens and the chunked log-prob path). `decide_role(...)` is
pure: given a probe
and an estimate it returns sampler / learner / none with human-readable reasons, so it is tested with
synthetic hardware.

Rules of the decision (role `auto`):
- a node that can train the model (best GPU's free memory >= training estimate: LoRA's when
  `learner.lora.enabled`, so a 24 GB GPU may learn with LoRA a model it cannot learn in full) becomes a learner
  while the run has fewer learners than it wants (`learner.max_learners`), else a sampler; a GPU that cannot
  train in full but could with LoRA is told so among the reasons;
- a node that can only run inference (GPU memory >= inference estimate, or CPU-only with a model under
  `CPU_SAMPLER_MAX_PARAMS` and enough RAM) becomes a sampler;
- CPU-only never trains, except the built-in tiny model (so the demo runs anywhere);
- otherwise `none`. `--role sampler|learner` is obeyed; a warning is added when it does not look like it fits.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Literal

from swarmnode.config import NodeConfig
from swarmnode.learner.memory import DTYPE_BYTES, ModelShape, micro_batch_rows_and_tokens, training_memory

__all__ = ["ModelShape", "MemoryEstimate", "decide_role", "estimate_memory", "probe_hardware"]

GiB = 1024**3
CPU_SAMPLER_MAX_PARAMS = 1_000_000_000  # CPU-only nodes sample only models under 1B parameters
GPU_RESERVED_BYTES = 512 * 1024**2  # CUDA context + allocator slack, per process
HEADROOM = 1.10  # 10% margin on every estimate for fragmentation and small buffers

Role = Literal["sampler", "learner", "none"]


@dataclass(frozen=True)
class GPUInfo:
    """One accelerator as torch sees it."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class HardwareProbe:
    """What this machine has: GPUs, CPU cores, RAM."""

    gpus: tuple[GPUInfo, ...]
    cpu_count: int
    ram_total_bytes: int
    ram_available_bytes: int

    def best_gpu(self) -> GPUInfo | None:
        """The GPU with the most free memory (a node uses one device), or None on a CPU-only machine."""
        return max(self.gpus, key=lambda g: g.free_bytes, default=None)

    def summary(self) -> dict:
        """A small dict for peer records and dashboards."""
        gpu = self.best_gpu()
        return {
            "gpu": gpu.name if gpu else None,
            "gpu_count": len(self.gpus),
            "gpu_mem_gb": round(gpu.total_bytes / GiB, 1) if gpu else 0.0,
            "cpus": self.cpu_count,
            "ram_gb": round(self.ram_total_bytes / GiB, 1),
        }

    def to_dict(self) -> dict:
        return asdict(self)

    def for_devices(self, sampler_device: str, learner_device: str) -> HardwareProbe:
        """This probe as the node may use it: without GPUs when both roles are pinned to `device: cpu`
        (`sampler.device`, `learner.device`)."""
        if sampler_device == "cpu" and learner_device == "cpu":
            return HardwareProbe((), self.cpu_count, self.ram_total_bytes, self.ram_available_bytes)
        return self


def probe_hardware() -> HardwareProbe:
    """Probe this machine (GPUs through torch.cuda, RAM through psutil)."""
    import psutil  # psutil, torch and models are imported here, not at the top: the CLI imports this module
    import torch  # for `swarmnode hardware` and `--help`, which must answer without loading torch

    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            gpus.append(GPUInfo(i, torch.cuda.get_device_name(i), int(total), int(free)))
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    mem = psutil.virtual_memory()
    return HardwareProbe(tuple(gpus), cpus, int(mem.total), int(mem.available))


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes needed to sample with and to train the configured model (before headroom)."""

    model_name: str
    parameters: int
    dtype: str
    builtin_tiny: bool
    weights_bytes: int  # in model.dtype, as a sampler holds them
    kv_cache_bytes: int
    inference_activation_bytes: int
    training: dict = field(default_factory=dict)  # learner.memory.TrainingMemory.to_dict() for the config
    lora_training_bytes: int = 0  # the same learner with LoRA r=16 (what a full-training config could switch to)
    notes: tuple[str, ...] = field(default=())

    @property
    def inference_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.inference_activation_bytes

    @property
    def training_bytes(self) -> int:
        return int(self.training.get("total", 0))

    @property
    def grads_bytes(self) -> int:
        return int(self.training.get("grads", 0))

    @property
    def optimizer_bytes(self) -> int:
        return int(self.training.get("optimizer", 0))

    @property
    def training_activation_bytes(self) -> int:
        t = self.training
        return int(t.get("activations", 0) + t.get("logprobs", 0) + t.get("optimizer_step", 0))

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(
            inference_bytes=self.inference_bytes,
            training_bytes=self.training_bytes,
            grads_bytes=self.grads_bytes,
            optimizer_bytes=self.optimizer_bytes,
            training_activation_bytes=self.training_activation_bytes,
        )
        return out


def estimate_from_shape(shape: ModelShape, cfg: NodeConfig) -> MemoryEstimate:
    """Pure sizing of one sampler and one learner process for `cfg` on a model of this shape.

    Sampler: weights + KV cache for one group (G sequences of max prompt + completion length) + a forward's
    activations. Learner: `learner.memory.training_memory` (master weights or a LoRA base, grads and AdamW of
    what trains, one micro-batch's activations with or without checkpointing, the chunked log-prob path).
    """
    s, lc = cfg.sampler, cfg.learner
    b = DTYPE_BYTES[cfg.model.dtype]
    seq_len = s.max_prompt_length + s.max_completion_length
    kv_per_token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * b
    kv = kv_per_token * seq_len * s.num_generations
    inf_act = s.num_generations * (seq_len * shape.hidden_size * b * 4 + shape.vocab_size * 4)
    device_type = "cpu" if lc.device == "cpu" else "cuda"
    training = training_memory(shape, cfg, device_type)
    lora_cfg = cfg.model_copy(
        update={"learner": lc.model_copy(update={"lora": lc.lora.model_copy(update={"enabled": True})})}
    )
    rows, tokens = micro_batch_rows_and_tokens(cfg.learner, cfg.sampler)
    notes = (
        f"sampler: KV cache for one group of {s.num_generations} x {seq_len} tokens",
        f"learner: {'LoRA r=' + str(lc.lora.r) if lc.lora.enabled else 'full'} training, micro-batch of {rows} "
        f"sequences ({tokens} tokens), AdamW fp32 m+v, activation checkpointing "
        f"{'on' if cfg.model.gradient_checkpointing else 'off'}, chunked log-probs"
        + (f", beta {lc.beta:g}: a reference copy of the weights in {cfg.model.dtype}" if training.reference else ""),
    )
    return MemoryEstimate(
        model_name=cfg.model.name,
        parameters=shape.parameters,
        dtype=cfg.model.dtype,
        builtin_tiny=cfg.model.name == "builtin:tiny",
        weights_bytes=shape.parameters * b,
        kv_cache_bytes=kv,
        inference_activation_bytes=inf_act,
        training=training.to_dict(),
        lora_training_bytes=training_memory(shape, lora_cfg, device_type).total,
        notes=notes,
    )


def estimate_memory(cfg: NodeConfig) -> MemoryEstimate:
    """Size the configured model (its architecture is read without loading weights; may raise ModelLoadError)."""
    from swarmnode.model.models import estimate_parameters, model_architecture

    hf_cfg = model_architecture(cfg.model)
    return estimate_from_shape(ModelShape.from_hf_config(hf_cfg, estimate_parameters(hf_cfg)), cfg)


@dataclass(frozen=True)
class RoleDecision:
    """The role this node takes, the device it works on, and why."""

    role: Role
    device: str
    reasons: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"role": self.role, "device": self.device, "reasons": list(self.reasons)}


def _gb(n: float) -> str:
    """Bytes as GiB, or MiB below 1 GiB."""
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / 1024**2:.1f} MiB"


def _fits(need: int, have: int, reserved: int) -> bool:
    return need * HEADROOM + reserved <= have


def decide_role(
    probe: HardwareProbe,
    estimate: MemoryEstimate,
    requested_role: str = "auto",
    learners_in_run: int | None = None,
    max_learners: int = 1,
) -> RoleDecision:
    """Pick sampler / learner / none for this hardware and model (pure; see the module docstring)."""
    gpu = probe.best_gpu()
    reasons: list[str] = []
    if gpu is not None:
        device, have, reserved, where = f"cuda:{gpu.index}", gpu.free_bytes, GPU_RESERVED_BYTES, f"GPU {gpu.name}"
        can_infer = _fits(estimate.inference_bytes, have, reserved)
        can_train = _fits(estimate.training_bytes, have, reserved)
        cpu_block = ""
    else:
        device, have, reserved, where = "cpu", probe.ram_available_bytes, 0, "CPU-only (RAM)"
        small = estimate.parameters < CPU_SAMPLER_MAX_PARAMS
        can_infer = small and _fits(estimate.inference_bytes, have, reserved)
        can_train = estimate.builtin_tiny and _fits(estimate.training_bytes, have, reserved)
        cpu_block = (
            "" if small else f"CPU-only nodes sample only models under {CPU_SAMPLER_MAX_PARAMS / 1e9:.0f}B parameters"
        )
    reasons.append(
        f"{where}: {_gb(have)} free; {estimate.model_name} ({estimate.parameters / 1e6:,.1f}M params, "
        f"{estimate.dtype}) needs ~{_gb(estimate.inference_bytes * HEADROOM)} to sample, "
        f"~{_gb(estimate.training_bytes * HEADROOM)} to train"
    )
    if cpu_block:
        reasons.append(cpu_block)
    if gpu is None and not estimate.builtin_tiny:
        reasons.append("CPU-only nodes never train (except the built-in tiny model)")
    seats_left = learners_in_run is None or learners_in_run < max_learners
    seats = "learner count unknown" if learners_in_run is None else f"run has {learners_in_run}/{max_learners} learners"

    if requested_role in ("sampler", "learner"):
        role: Role = "learner" if requested_role == "learner" else "sampler"
        reasons.append(f"role {role} requested explicitly")
        if not (can_train if role == "learner" else can_infer):
            reasons.append(f"warning: this hardware does not look able to work as a {role}")
        return RoleDecision(role, device, tuple(reasons))
    if requested_role != "auto":
        raise ValueError(f"requested_role must be auto, sampler or learner (got {requested_role!r})")

    if can_train and seats_left:
        reasons.append(f"can train the model and {seats} -> learner")
        return RoleDecision("learner", device, tuple(reasons))
    if can_train and can_infer:
        reasons.append(f"can train, but {seats} -> sampler")
        return RoleDecision("sampler", device, tuple(reasons))
    if can_infer:
        if not can_train and _fits(estimate.lora_training_bytes, have, reserved) and gpu is not None:
            reasons.append(
                f"as a LoRA learner it would need ~{_gb(estimate.lora_training_bytes * HEADROOM)}, "
                "which fits (--set learner.lora.enabled=true)"
            )
        reasons.append("can run inference but not training -> sampler")
        return RoleDecision("sampler", device, tuple(reasons))
    reasons.append("cannot run the model -> none (use a smaller model or bigger hardware, or force --role)")
    return RoleDecision("none", device, tuple(reasons))


def hardware_report(cfg: NodeConfig, requested_role: str | None = None, probe: HardwareProbe | None = None) -> dict:
    """Probe, estimate and decide for `cfg`: what `swarmnode hardware` prints."""
    probe = (probe or probe_hardware()).for_devices(cfg.sampler.device, cfg.learner.device)
    estimate = estimate_memory(cfg)
    role = requested_role or cfg.role
    if role == "auto" and cfg.mode != "sapo" and cfg.trust.learner_keys and not holds_learner_key(cfg):
        decision = decide_role(probe, estimate, role, cfg.learner.max_learners, cfg.learner.max_learners)
        reasons = (*decision.reasons, "not one of the run's designated learners (trust.learner_keys): it samples")
        decision = RoleDecision("none" if decision.role == "none" else "sampler", decision.device, reasons)
    else:
        decision = decide_role(probe, estimate, role, max_learners=cfg.learner.max_learners)
    return {"probe": probe.to_dict(), "estimate": estimate.to_dict(), **decision.to_dict()}


def holds_learner_key(cfg: NodeConfig) -> bool:
    """Whether this machine's node key (`network.identity_path`, else `<data dir>/identity.key`, as `join` uses)
    exists and is one of the run's `trust.learner_keys`: a run that names its learners seats no other."""
    from swarmnode.identity import Identity, IdentityError

    path = cfg.network.identity_path or cfg.resolved_data_dir() / "identity.key"
    try:
        return Identity.load(path).peer_id in cfg.trust.learner_keys
    except IdentityError:
        return False


def format_report(report: dict) -> str:
    """The human-readable form of `hardware_report`."""
    p, e = report["probe"], report["estimate"]
    t = e["training"]
    lines = [f"CPU: {p['cpu_count']} cores, RAM {_gb(p['ram_available_bytes'])} free of {_gb(p['ram_total_bytes'])}"]
    lines += [
        f"GPU {g['index']}: {g['name']}, {_gb(g['free_bytes'])} free of {_gb(g['total_bytes'])}" for g in p["gpus"]
    ]
    if not p["gpus"]:
        lines.append("GPU: none")
    lines.append(
        f"model {e['model_name']}: {e['parameters'] / 1e6:,.1f}M params in {e['dtype']}; "
        f"sample ~{_gb(e['inference_bytes'])} (weights {_gb(e['weights_bytes'])} + KV {_gb(e['kv_cache_bytes'])}), "
        f"train ~{_gb(e['training_bytes'])} (weights {_gb(t.get('weights', 0))}"
        f"{' + reference model ' + _gb(t['reference']) if t.get('reference') else ''} + AdamW {_gb(e['optimizer_bytes'])}"
        f" + the larger of activations and log-probs {_gb(t.get('activations', 0) + t.get('logprobs', 0))} and "
        f"grads and AdamW's step {_gb(t.get('grads', 0) + t.get('optimizer_step', 0))}; with LoRA "
        f"~{_gb(e['lora_training_bytes'])}), before {int((HEADROOM - 1) * 100)}% headroom"
    )
    lines += [f"  {note}" for note in e["notes"]]
    lines.append(f"role: {report['role']} on {report['device']}")
    lines += [f"  - {r}" for r in report["reasons"]]
    return "\n".join(lines)
