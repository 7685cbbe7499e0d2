"""Mixed precision for the learner: fp32 master weights, forward/backward under autocast.

A model loaded in bf16/fp16 (`model.dtype`) is trained with its parameters, gradients and AdamW state in fp32
and the forward/backward under `torch.autocast` in the model's dtype (precision `auto` on a GPU, `autocast`
anywhere). Published versions are cast back to `model.dtype`, so samplers fetch the bytes they load.
Pure half-precision training (`pure`) keeps everything in `model.dtype`; the config refuses it at a learning
rate where AdamW's updates would round away (config.PURE_HALF_MIN_LR).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import torch

from swarmnode.config import NodeConfig
from swarmnode.transfers import host_copies

logger = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """How the learner computes: master parameter dtype, autocast dtype (None: off), published dtype."""

    master_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    publish_dtype: torch.dtype
    device_type: str

    @classmethod
    def from_config(cls, cfg: NodeConfig, device: torch.device | str) -> "Precision":
        device_type = torch.device(device).type
        model_dtype = DTYPES[cfg.model.dtype]
        half = model_dtype != torch.float32
        mode = cfg.learner.precision
        if mode == "pure":
            return cls(model_dtype, None, model_dtype, device_type)
        if mode == "autocast" or (mode == "auto" and half and device_type == "cuda"):
            return cls(torch.float32, model_dtype if half else torch.bfloat16, model_dtype, device_type)
        return cls(torch.float32, None, model_dtype, device_type)

    def describe(self) -> str:
        compute = f"autocast {_name(self.autocast_dtype)}" if self.autocast_dtype else f"{_name(self.master_dtype)}"
        return f"{_name(self.master_dtype)} weights and AdamW state, {compute} forward/backward"

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

    def for_publishing(self, tensor: torch.Tensor) -> torch.Tensor:
        """A detached CPU copy of `tensor` in the published dtype (floating tensors only are cast)."""
        return tensor.detach().to("cpu", dtype=self._published_dtype(tensor), copy=True)

    def snapshot(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`for_publishing` of every tensor of `state`; from a GPU, the host waits once for all the copies (not
        once per tensor)."""
        return host_copies(state, self._published_dtype)

    def _published_dtype(self, tensor: torch.Tensor) -> torch.dtype:
        return self.publish_dtype if tensor.is_floating_point() else tensor.dtype


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
