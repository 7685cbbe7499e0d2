"""Host <-> device transfers that do not stall a GPU's queue.

On a GPU, every tensor -> Python conversion (`float(t)`, `.item()`, `.tolist()`, `.cpu()`), every copy from
pageable host memory, and every data-dependent shape (boolean indexing, `nonzero`) makes the host wait until the
GPU has run everything queued so far: the host then cannot queue the next kernels while the GPU computes. The
learner step keeps those to a few per step with these helpers:
- `to_device`: a host tensor on the device, copied asynchronously from pinned memory (the host does not wait);
- `readback`: many scalar tensors (a step's diagnostics) brought to Python floats in one transfer;
- `host_copies`: CPU copies of many device tensors (a published version) with one wait at the end.
On CPU all three are what the plain calls would do, without extra copies.
"""

from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`tensor` (on the host) on `device`; to a CUDA device through pinned memory, without the host waiting."""
    device = torch.device(device)
    if tensor.device == device or device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def readback(values: dict[str, torch.Tensor | float]) -> dict[str, float]:
    """`values` with every scalar tensor turned into a Python float: one transfer per device holding some.

    Each float is exactly `float(tensor)` (float32, integer and bool values are exact in float64)."""
    out: dict[str, float] = {k: v for k, v in values.items() if not isinstance(v, torch.Tensor)}
    by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
    for k, v in values.items():
        if isinstance(v, torch.Tensor):
            by_device.setdefault(v.device, []).append((k, v))
    for device, items in by_device.items():
        dtype = torch.float32 if device.type == "mps" else torch.float64  # mps has no float64
        keys = [k for k, _ in items]
        stacked = torch.stack([v.detach().reshape(()).to(dtype) for _, v in items])
        out.update(zip(keys, stacked.tolist()))
    return {k: out[k] for k in values}


def readback_with(
    values: dict[str, torch.Tensor | float], table: torch.Tensor | None
) -> tuple[dict[str, float], list[list[float]] | None]:
    """`readback(values)` and the 2-D `table` as rows of floats, in the same one transfer from `table`'s device."""
    if table is None:
        return readback(values), None
    dtype = torch.float32 if table.device.type == "mps" else torch.float64
    near = {k: v for k, v in values.items() if isinstance(v, torch.Tensor) and v.device == table.device}
    scalars = [v.detach().reshape(1).to(dtype) for v in near.values()]
    flat = torch.cat([*scalars, table.detach().to(dtype).reshape(-1)]).tolist()
    got = {**readback({k: v for k, v in values.items() if k not in near}), **dict(zip(near, flat[: len(near)]))}
    cells, width = flat[len(near) :], max(table.shape[1], 1)
    return {k: got[k] for k in values}, [cells[i : i + width] for i in range(0, len(cells), width)]


def host_copies(tensors: dict[str, torch.Tensor], dtype_of) -> dict[str, torch.Tensor]:
    """CPU copies of `tensors`, each cast to `dtype_of(tensor)`: from a GPU, all copies are queued at once
    (into pinned memory) and the host waits once for the last, not once per tensor."""
    copies = {
        k: t.detach().to("cpu", dtype=dtype_of(t), non_blocking=t.device.type == "cuda", copy=True)
        for k, t in tensors.items()
    }
    for device in {t.device for t in tensors.values() if t.device.type == "cuda"}:
        torch.cuda.current_stream(device).synchronize()  # the copies are complete: safe to read
    return copies
