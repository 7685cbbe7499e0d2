"""`swarmnode export SOURCE --out DIR`: one version of a run as a Hugging Face directory (see `hf_dir`), from a
learner's data directory or from a live run's peers (an invite), with its model card; `--merge` folds a LoRA
version into its base; `--push-to-hub REPO` uploads the directory once it is whole."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from swarmnode.config import NodeConfig, load_config
from swarmnode.errors import ExitCode
from swarmnode.export.card import CardFacts, card_digest, write_card
from swarmnode.export.errors import ExportError
from swarmnode.export.hf_dir import (
    check_base,
    has_chat_template,
    load_base_state,
    merged_state,
    write_adapter,
    write_model,
)
from swarmnode.export.hub import push_dir
from swarmnode.export.run_info import read_run_info
from swarmnode.export.staging import check_room, staged_dir, temp_sibling
from swarmnode.export.versions import Version, local_version
from swarmnode.model.models import resolve_model_path
from swarmnode.model.sources import model_source
from swarmnode.protocol.run_card import RunCard


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def local_config(data_dir: Path, config: str | None, sets: list[str]) -> tuple[NodeConfig, RunCard | None]:
    """The run's config for a data directory: what its node recorded (`run_info`), or `--config`/`--set`."""
    info = read_run_info(data_dir)
    if config is not None or sets:
        return load_config(config, sets), info.card if info else None
    if info is None:
        raise ExportError(
            f"{data_dir} records no run config (run_config.json, written by nodes of this version): give the run's "
            "--config and --set",
            exit_code=ExitCode.USAGE,
        )
    return info.cfg, info.card


def export_version(
    found: Version,
    out: Path,
    cfg: NodeConfig,
    card: RunCard | None,
    *,
    merge: bool = False,
    base_state: dict | None = None,
    heldout: bool = False,
    replace: bool = False,
    check_base_weights: bool = True,
) -> dict[str, Any]:
    """Write `found` into `out` (whole or not at all); the export's summary. An adapter version's base weights are
    loaded and checked against its manifest's hash, unless `check_base_weights` is False and no `merge` is asked
    (the learner saving its own adapters: it trains on that base)."""
    base_dir = resolve_model_path(cfg.model, cfg.task, progress=_say)
    spec = found.manifest.adapter
    check_room(out, found.manifest.total_bytes * (1 if spec is None else 2), f"version {found.manifest.version}")
    with staged_dir(out, replace=replace) as tmp:
        if spec is None:
            write_model(tmp, base_dir, found.state, cfg.model, cfg.sampler)
            kind = "model"
        else:
            base = base_state
            if base is None and (merge or check_base_weights):
                base = load_base_state(base_dir, cfg.model)
            if base is not None:
                check_base(base, spec, cfg.model.name)
            if merge and base is not None:
                write_model(tmp, base_dir, merged_state(base, found.state, spec), cfg.model, cfg.sampler)
                kind = "merged"
            else:
                write_adapter(tmp, base_dir, found.state, spec, cfg.model, cfg.sampler)
                kind = "adapter"
        facts = CardFacts(
            run_id=cfg.run_id,
            version=found.manifest.version,
            base_model=cfg.model.name,
            base_digest=model_source(cfg.model, cfg.task),
            task=cfg.task.name,
            kind=kind,
            signer=found.manifest.publisher,
            source=found.source,
            card_digest=card_digest(card),
            card_version=card.version if card else None,
            chat_template=has_chat_template(tmp),
            prompt_format=cfg.model.prompt_format,
            config=cfg.model_dump(mode="json"),
        )
        if heldout:
            from swarmnode.export.scoring import evaluate_dir

            facts.heldout = evaluate_dir(tmp, cfg, base=False)["model_scores"]
        write_card(tmp, facts)
    return {
        "out": str(Path(out).absolute()),
        "run_id": cfg.run_id,
        "version": found.manifest.version,
        "kind": kind,
        "signer": found.manifest.publisher,
        "source": found.source,
        "base_model": cfg.model.name,
        "bytes": found.manifest.total_bytes,
        "heldout": facts.heldout or None,
    }


def run_export(
    source: str,
    out: Path,
    *,
    cfg: NodeConfig | None,
    card: RunCard | None,
    config: str | None = None,
    sets: list[str] | None = None,
    version: int | None = None,
    merge: bool = False,
    push_to_hub: str | None = None,
    heldout: bool = False,
) -> dict[str, Any]:
    """The export command: `cfg`/`card` given for an invite (the run's, from its card); else SOURCE is a data
    directory and its config is read there (or from `config`/`sets`)."""
    out = Path(out).expanduser().absolute()
    base_state = None
    if cfg is None:
        data_dir = Path(source).expanduser()
        if not data_dir.is_dir():
            raise ExportError(f"{source}: neither an invite (swarmnode1:...) nor a directory")
        cfg, card = local_config(data_dir, config, list(sets or []))
        found = local_version(data_dir, cfg.run_id, cfg.trust.learner_keys, version)
    else:
        from swarmnode.export.live import fetch_live, remove_store

        base_hash = None
        if cfg.learner.lora.enabled:
            from swarmnode.model.adapters import weights_hash

            base_state = load_base_state(resolve_model_path(cfg.model, cfg.task, progress=_say), cfg.model)
            base_hash = weights_hash(base_state)
        store_dir = temp_sibling(out, "weights")
        try:
            found = asyncio.run(fetch_live(cfg, version, store_dir, base_hash))
        finally:
            remove_store(store_dir)
    result = export_version(found, out, cfg, card, merge=merge, base_state=base_state, heldout=heldout)
    if push_to_hub:
        result["pushed"] = push_dir(out, push_to_hub, cfg.run_id, found.manifest.version)
    return result


def format_export(result: dict[str, Any]) -> str:
    line = (
        f"exported run {result['run_id']} version {result['version']} ({result['kind']}, signed by "
        f"{result['signer'][-8:]}) to {result['out']}"
    )
    if result.get("heldout"):
        line += f"; held-out reward {result['heldout']['eval_reward']:.4f}"
    if result.get("pushed"):
        line += f"; pushed: {result['pushed']}"
    return line
