"""The commands on a trained model: `export` (a version as a Hugging Face model directory) and `eval` (an export
scored against its base on the task's held-out split)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import typer

from swarmnode.cli.options import ConfigOpt, JsonOpt, SetOpt, StartupOpt
from swarmnode.cli.running import print_json
from swarmnode.cli.settings import client_config, config_from_cli, fail
from swarmnode.config import build_config


def export(
    source: str = typer.Argument(..., help="a learner's data directory, or the run's invite (swarmnode1:...)"),
    out: str = typer.Option(..., "--out", "-o", help="the directory to write (must not exist, or be empty)"),
    version: int | None = typer.Option(None, "--version", min=0, help="the version to export (default: the newest)"),
    merge: bool = typer.Option(False, "--merge", help="LoRA runs: fold the adapter into the base (a full model)"),
    push_to_hub: str | None = typer.Option(None, "--push-to-hub", help="then upload it to this Hub repo (owner/name)"),
    heldout: bool = typer.Option(False, "--eval", help="score it on the task's held-out split for the model card"),
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    as_json: bool = JsonOpt,
    startup_timeout: float | None = StartupOpt,
) -> None:
    """Write one version of a run as a Hugging Face model directory (a PEFT adapter for LoRA runs), with a model
    card: from a learner's data directory, or fetched from a live run's peers (docs/model-out.md)."""
    from swarmnode.protocol.run_card import looks_like_invite

    cfg = card = None
    if looks_like_invite(source):
        cfg, card = client_config("export", config, set_, None, None, startup_timeout, source)
        from swarmnode.cli_runtime import setup_logging

        setup_logging()
    from swarmnode.export.command import format_export, run_export

    with contextlib.redirect_stdout(sys.stderr):  # model builds print progress; stdout is the result's
        result = run_export(
            source,
            Path(out),
            cfg=cfg,
            card=card,
            config=config,
            sets=list(set_ or []),
            version=version,
            merge=merge,
            push_to_hub=push_to_hub,
            heldout=heldout,
        )
    print_json(result) if as_json else typer.echo(format_export(result))


def eval_model(
    model: str = typer.Option(..., "--model", "-m", help="an exported directory (swarmnode export --out DIR)"),
    config: str | None = typer.Option(
        None, "--config", "-c", help="the run's preset or YAML (default: the one the export recorded)"
    ),
    set_: list[str] | None = SetOpt,
    samples: int = typer.Option(4, "--samples", min=1, max=64, help="completions per held-out prompt (mean@k)"),
    no_base: bool = typer.Option(False, "--no-base", help="score the exported model only, not the base beside it"),
    as_json: bool = JsonOpt,
) -> None:
    """Score an exported model and its base model on the task's held-out split, paired over the same prompts."""
    from swarmnode.export.card import read_facts

    facts = read_facts(Path(model))
    if config is None and not set_ and facts is None:
        fail(f"{model} has no swarmnode_export.json: give the run's --config")
    cfg = config_from_cli(config, set_) if config is not None or set_ else build_config(facts.config if facts else {})
    from swarmnode.export.scoring import evaluate_dir, format_eval
    from swarmnode.observe.progress import count_progress

    with contextlib.redirect_stdout(sys.stderr), count_progress() as progress:
        doc = evaluate_dir(Path(model), cfg, samples=samples, base=not no_base, progress=progress)
    print_json(doc) if as_json else typer.echo(format_eval(doc))
