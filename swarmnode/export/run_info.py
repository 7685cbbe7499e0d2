"""What a node ran with, kept in its data directory so that `swarmnode export DATA_DIR` needs nothing else:
`<data dir>/run_config.json` holds the node's config and, when it joined by invite, the run card it followed."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmnode.config import NodeConfig, build_config
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.run_card import RunCard

RUN_INFO_FILE = "run_config.json"


@dataclass
class RunInfo:
    """A run's config and (if the node had one) its card."""

    cfg: NodeConfig
    card: RunCard | None = None


def write_run_info(data_dir: Path, cfg: NodeConfig, card: RunCard | None = None) -> None:
    """Write `<data_dir>/run_config.json` atomically (a node writes it when it starts)."""
    doc: dict[str, Any] = {"config": cfg.model_dump(mode="json"), "card": card.to_file() if card else None}
    path = Path(data_dir) / RUN_INFO_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=True))
        os.replace(tmp, path)
    except OSError:  # a full disk: the node runs on; an export from this directory then needs --config
        tmp.unlink(missing_ok=True)


def read_run_info(data_dir: Path) -> RunInfo | None:
    """The run info a node left in `data_dir`, or None when there is none (or it cannot be read)."""
    try:
        doc = json.loads((Path(data_dir) / RUN_INFO_FILE).read_text())
        cfg = build_config(doc["config"])
        card = RunCard.from_file(doc["card"]) if doc.get("card") else None
    except (OSError, ValueError, KeyError, TypeError, InvalidRecord):
        return None
    return RunInfo(cfg, card)
