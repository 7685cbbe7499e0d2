"""Mixed precision for the learner: fp32 master weights, forward/backward under autocast.

A model loaded in bf16/fp16 (`model.dtype`) is trained with its parameters, gradients and AdamW state in fp32
and the forward/backward under `torch.autocast` in the model's dtype (precision `auto` on a GPU, `autocast`
anywhere). Published versions are cast to `learner.publish_dtype` (`model`: back to `model.dtype`, so samplers
fetch the bytes they load; `bfloat16` for a float32 model halves every fetch, the samplers casting on load).
Pure half-precision training (`pure`) keeps everything in `model.dtype`; the config refuses it at a learning
rate where AdamW's updates would round away (config.PURE_HALF_MIN_LR).

fp16 autocast (a `float16` model, or a `bfloat16` one on a GPU without bf16: T4, V100, GTX/RTX 20-series)
trains with a dynamic loss scaler (`torch.amp.GradScaler`): the loss is scaled before backward so that small
gradients do not flush to zero in fp16, the gradients are unscaled before clipping, and a step whose gradients
overflowed is skipped while the scale shrinks. bf16 and fp32 need no scaler (`backward`/`step` are plain then).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

import torch

from swarmnode.config import NodeConfig
from swarmnode.model.transfers import host_copies

logger = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """How the learner computes: master parameter dtype, autocast dtype (None: off), published dtype."""

    master_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    publish_dtype: torch.dtype
    device_type: str
    scaler: torch.amp.GradScaler | None = field(default=None, compare=False)

    @classmethod
    def from_config(cls, cfg: NodeConfig, device: torch.device | str) -> Precision:
        device_type = torch.device(device).type
        model_dtype = DTYPES[cfg.model.dtype]
        publish = published_dtype(cfg)
        half = model_dtype != torch.float32
        mode = cfg.learner.precision
        if mode == "pure":
            return cls(model_dtype, None, publish, device_type)
        if mode == "autocast" or (mode == "auto" and half and device_type == "cuda"):
            compute = model_dtype if half else torch.bfloat16
            if compute == torch.bfloat16 and device_type == "cuda" and not torch.cuda.is_bf16_supported():
                logger.warning("this GPU has no bf16: the learner computes in fp16 with a loss scaler")
                compute = torch.float16
            return cls.with_autocast(compute, publish, device_type)
        return cls(torch.float32, None, publish, device_type)

    @classmethod
    def with_autocast(cls, compute: torch.dtype, publish: torch.dtype, device_type: str) -> Precision:
        """fp32 master weights under autocast in `compute`; a loss scaler when that is fp16."""
        scaler = torch.amp.GradScaler(device_type) if compute == torch.float16 else None
        return cls(torch.float32, compute, publish, device_type, scaler)

    def describe(self) -> str:
        compute = f"autocast {_name(self.autocast_dtype)}" if self.autocast_dtype else f"{_name(self.master_dtype)}"
        return (
            f"{_name(self.master_dtype)} weights and AdamW state, {compute} forward/backward, "
            f"versions published in {_name(self.publish_dtype)}"
        )

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Cast the trainable parameters to the master dtype, in place (without autocast, the frozen ones too:
        a LoRA base stays in model.dtype only when autocast computes in it); logs the choice."""
        for p in model.parameters():
            if p.is_floating_point() and p.dtype != self.master_dtype and (p.requires_grad or not self.autocast_dtype):
                p.data = p.data.to(self.master_dtype)
        logger.info("learner precision: %s", self.describe())
        return model

    def autocast(self) -> contextlib.AbstractContextManager:
        """The context the forward and backward run in."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """`loss.backward()`, scaled first when a loss scaler is in use."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the loss scale (in place) before they are clipped or read; no-op without one."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, finite: bool) -> bool:
        """Step `optimizer` when the (unscaled) gradients are finite; with a scaler, update its scale (an overflow
        shrinks it: a normal event in fp16, not bad data). True when the weights moved."""
        if self.scaler is None:
            if finite:
                optimizer.step()
            return finite
        self.scaler.step(optimizer)  # skips the step itself when the unscaled gradients held inf/nan
        self.scaler.update()
        return finite

    @property
    def loss_scale(self) -> float | None:
        """The loss scaler's current scale, or None without one."""
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    def snapshot(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A detached CPU copy of every tensor of `state` in the published dtype (floating tensors only are cast);
        from a GPU, the host waits once for all the copies (not once per tensor)."""
        return host_copies(state, self._published_dtype)

    def _published_dtype(self, tensor: torch.Tensor) -> torch.dtype:
        return self.publish_dtype if tensor.is_floating_point() else tensor.dtype


def published_dtype(cfg: NodeConfig) -> torch.dtype:
    """The dtype a run's versions carry their floating tensors in (`learner.publish_dtype`, `model`: `model.dtype`)."""
    name = cfg.learner.publish_dtype
    return DTYPES[cfg.model.dtype if name == "model" else name]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
