"""Each tracker's logged scalars read back through the tracker's own formats: tensorboard's `EventAccumulator`,
trackio's local store (`SQLiteStorage`), and a wandb offline run's `.wandb` file (wandb's protobuf `Record`s in
the leveldb log framing wandb writes: a 7-byte file header, 32 KiB blocks, 7-byte chunk headers)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

WANDB_HEADER = 7  # ":W&B", a 2-byte magic, a 1-byte version
BLOCK = 32768
CHUNK_HEADER = 7  # crc32 (4), length (2), type (1: full, 2: first, 3: middle, 4: last)


def tensorboard_scalars(log_dir: Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of the event files under `log_dir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def trackio_scalars(project: str, run: str) -> dict[str, dict[int, float]]:
    """{metric: {step: value}} of a trackio run in its local store."""
    from trackio.sqlite_storage import SQLiteStorage

    out: dict[str, dict[int, float]] = {}
    for row in SQLiteStorage.get_logs(project, run):
        for key, value in row.items():
            if key not in ("step", "timestamp") and isinstance(value, (int, float)):
                out.setdefault(key, {})[int(row["step"])] = float(value)
    return out


def _wandb_records(path: Path):
    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a wandb run file"
    pos, pending = WANDB_HEADER, b""
    while pos + CHUNK_HEADER <= len(data):
        if BLOCK - pos % BLOCK < CHUNK_HEADER:  # the block's tail is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if length == 0 and kind == 0:
            break
        chunk = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        pending += chunk
        if kind in (1, 4):
            yield pending
            pending = b""


def wandb_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """{metric: {step: value}} of the history records in the offline run under `run_dir` (its `run-*.wandb`)."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("run-*.wandb")
    out: dict[str, dict[int, float]] = {}
    for raw in _wandb_records(path):
        record = pb.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") != "history":
            continue
        items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
        step = int(items.pop("_step", record.history.step.num))
        for key, value in items.items():
            if not key.startswith("_") and isinstance(value, (int, float)):
                out.setdefault(key, {})[step] = float(value)
    return out
