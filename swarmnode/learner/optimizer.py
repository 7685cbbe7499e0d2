"""The learner's AdamW: fused (one kernel over all parameters, every element read and written once) where torch
has the fused kernel for the parameters' device, else foreach (one kernel per operation for all tensors).

The fused kernel applies the same update as the foreach one, to within one float32 rounding per element; on
CPU it takes about a fifth of the time (bench/learner-fixed-cost: the optimiser is most of a full-model step's
fixed cost there)."""

from __future__ import annotations

import torch
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from swarmnode.config import LearnerConfig


def fused_supported(params: list[torch.nn.Parameter]) -> bool:
    """Whether torch's fused AdamW takes these parameters (floating, on one supported device type)."""
    kinds = {p.device.type for p in params}
    return (
        len(kinds) == 1
        and kinds <= set(_get_fused_kernels_supported_devices())
        and all(p.is_floating_point() for p in params)
    )


def build_optimizer(params: list[torch.nn.Parameter], lc: LearnerConfig) -> torch.optim.AdamW:
    """AdamW over `params` at the configured learning rate and weight decay, fused where supported."""
    fused = fused_supported(params)
    return torch.optim.AdamW(
        params, lr=lc.learning_rate, weight_decay=lc.weight_decay, fused=fused or None, foreach=None if fused else True
    )
