"""A micro-batch's per-row sampler data as tensors on the learner's device, built on the host in one pass and
copied without the host waiting for the device (`swarmnode.model.transfers.to_device`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from swarmnode.learner.rows import Row
from swarmnode.model.transfers import to_device


def padded(values: list[list[float]], width: int) -> torch.Tensor:
    """[len(values), width] float32 host tensor: row i holds values[i] (at most `width` of them), then zeros."""
    lengths = torch.tensor([min(len(v), width) for v in values], dtype=torch.long)
    out = torch.zeros(len(values), width, dtype=torch.float32)
    out[torch.arange(width)[None, :] < lengths[:, None]] = torch.tensor(
        [x for v in values for x in v[:width]], dtype=torch.float32
    )
    return out


@dataclass
class RowTensors:
    """Behaviour log-probs [B, T] (zero-padded), rewards [B] and group index [B] on the device; staleness [B]
    on the host (the loss reads its statistics there)."""

    logq: torch.Tensor
    rewards: torch.Tensor
    group_index: torch.Tensor
    staleness: torch.Tensor


def row_tensors(rows: list[Row], width: int, group_index: torch.Tensor, device) -> RowTensors:
    """The `RowTensors` of `rows`, whose completions are padded to `width` tokens."""
    return RowTensors(
        logq=to_device(padded([r.logq for r in rows], width), device),
        rewards=to_device(torch.tensor([r.reward for r in rows]), device),
        group_index=to_device(group_index, device),
        staleness=torch.tensor([r.staleness for r in rows]),
    )
