"""The commands on this machine alone: `hardware` (the probe, the role it would take, `--measure`), `demo` (a
local swarm of processes) and `train-local` (the single-process reference loop)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import typer

from swarmnode.cli.options import ConfigOpt, InviteArg, JsonOpt, RoleOpt, SetOpt
from swarmnode.cli.running import print_json
from swarmnode.cli.settings import cli_sets, config_from_cli, fail, invite_config
from swarmnode.config import LEVEL_OF_ALGORITHM
from swarmnode.delay import DelaySpecError, parse_delay
from swarmnode.errors import Interrupted
from swarmnode.local.swarm import MAX_DEMO_LEARNERS


def hardware(
    invite: str | None = InviteArg,
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    as_json: bool = JsonOpt,
    role: str | None = RoleOpt,
    measure: bool = typer.Option(
        False,
        "--measure",
        help="run the self-check: one learner step, one "
        "generation batch per engine, the bf16 log-prob floor, the fp16 check",
    ),
    device: str = typer.Option("auto", "--device", help="self-check device: auto | cpu | cuda"),
) -> None:
    """Probe this machine and show the role it would take for the configured model, or an invite's run (`--measure`:
    self-check)."""
    cfg, card = (
        invite_config(invite, config, cli_sets(set_, role=role))
        if invite
        else (config_from_cli(config, set_, role=role), None)
    )
    if measure:
        from swarmnode.node.selfcheck import format_selfcheck, run_selfcheck

        with contextlib.redirect_stdout(sys.stderr):  # model builds print progress; stdout is the result's
            result = run_selfcheck(cfg, device, progress=lambda m: typer.echo(m, err=True))
        print_json(result) if as_json else typer.echo(format_selfcheck(result))
        return
    from swarmnode.node.hardware import estimate_memory, format_report, hardware_report, probe_hardware
    from swarmnode.node.preset_fit import format_fit, preset_fit

    probe = probe_hardware()
    report = hardware_report(cfg, probe=probe)
    report["preset_fit"] = preset_fit(probe)
    from swarmnode.node.disk_need import disk_need, format_disk

    report["disk"] = disk_need(cfg, estimate_memory(cfg))
    from swarmnode.tasks.pins import pin_needs

    report["task_needs"] = pin_needs(card.sources) if card is not None else []  # the run's task packages, rewards
    if as_json:
        print_json(report)
    else:
        needs = [f"task {cfg.task.name} needs: {n}" for n in report["task_needs"]]
        typer.echo(
            "\n".join([format_report(report), format_disk(report["disk"]), *format_fit(report["preset_fit"]), *needs])
        )


def demo(
    config: str = typer.Option("tiny-cpu", "--config", "-c", help="preset name (tiny-cpu, smollm2-135m) or YAML path"),
    as_json: bool = JsonOpt,
    set_: list[str] | None = SetOpt,
    steps: int | None = typer.Option(300, "--steps", min=1, help="stop after this many learner steps"),
    minutes: float = typer.Option(10.0, "--minutes", min=0.1, help="stop after this many minutes at most"),
    workdir: str | None = typer.Option(None, "--workdir", help="where the nodes keep keys, logs and data"),
    kill_sampler_at: int | None = typer.Option(
        None, "--kill-sampler-at", min=1, help="at this learner step, kill sampler2 (SIGKILL) and start it again"
    ),
    keep: bool = typer.Option(False, "--keep", help="keep the temporary work dir (logs, data) instead of removing it"),
    learners: int = typer.Option(
        1,
        "--learners",
        help=f"learners to run (1 to {MAX_DEMO_LEARNERS}); above 1 they "
        "average through hivemind (learner.max_learners) and --steps counts each one's",
    ),
) -> None:
    """Run a local swarm (bootstrap, one learner or --learners N, two samplers), by default with the tiny model, and
    watch it learn."""
    if not 1 <= learners <= MAX_DEMO_LEARNERS:
        fail(f"--learners {learners}: expected 1 to {MAX_DEMO_LEARNERS} (each learner is a process on this machine)")
    config_from_cli(config, set_)  # a bad --config or --set fails here, before any process starts
    from swarmnode.local.demo import format_summary, run_demo

    summary = run_demo(
        steps=steps,
        minutes=minutes,
        quiet=as_json,
        sets=list(set_ or []),
        workdir=workdir,
        kill_sampler_at=kill_sampler_at,
        keep=keep,
        config=config,
        learners=learners,
    )
    if as_json:
        print_json(summary)
    else:
        typer.echo(format_summary(summary))
    if summary["stopped"] == "interrupted":  # the summary so far is printed; the exit code says Ctrl-C
        raise Interrupted("interrupted")


def train_local(
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    as_json: bool = JsonOpt,
    steps: int = typer.Option(
        100, "--steps", min=1, help="learner steps in total (a resumed run counts its earlier ones)"
    ),
    staleness: int = typer.Option(0, "--staleness", min=0, help="train on rollouts from the weights of k versions ago"),
    algorithm: str | None = typer.Option(
        None, "--algorithm", help="gepo | gspo | grpo (= learner.importance_sampling_level group | sequence | token)"
    ),
    old_algorithm: str | None = typer.Option(
        None, "--loss-type", hidden=True, help="the old name of --algorithm (warns once)"
    ),
    checkpoint_dir: str | None = typer.Option(None, "--checkpoint-dir", help="checkpoint here; resume from it"),
    max_seconds: float | None = typer.Option(
        None, "--max-seconds", min=0, help="stop (with a checkpoint) after this long"
    ),
    delay: str | None = typer.Option(
        None,
        "--delay",
        help="per-version weight delay in LEARNER STEPS, drawn as in --simulate-delay "
        "(fixed:S | lognormal:MU,SIGMA[,MAX] | weibull:SCALE,SHAPE[,MAX]); replaces --staleness",
    ),
    eval_every: int = typer.Option(0, "--eval-every", min=0, help="evaluate on the held-out prompts every N steps"),
) -> None:
    """Single-process sampler+learner loop: the reference the swarm is compared against."""
    flag = "--algorithm"
    if old_algorithm is not None:
        typer.echo(
            "warning: --loss-type is now --algorithm (learner.loss_type is TRL's token aggregation, not the algorithm)",
            err=True,
        )
        algorithm, flag = algorithm or old_algorithm, "--loss-type"
    if algorithm is not None and algorithm not in LEVEL_OF_ALGORITHM:
        fail(f"{flag} {algorithm!r}: expected gepo, gspo or grpo")
    level = LEVEL_OF_ALGORITHM[algorithm] if algorithm is not None else None
    cfg = config_from_cli(config, set_, **{"learner.importance_sampling_level": level})
    try:
        delay_model = parse_delay(delay)
    except DelaySpecError as exc:
        fail(str(exc).replace("--simulate-delay", "--delay"))
    if checkpoint_dir is not None:
        check_checkpoint_dir(Path(checkpoint_dir).expanduser())
    from swarmnode.local.trainer import train_local as run_local

    progress = (lambda msg: typer.echo(msg, err=True)) if as_json else typer.echo
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():  # stdout: the JSON alone
        result = run_local(cfg, steps, staleness, checkpoint_dir, progress, max_seconds, delay_model, eval_every)
    if result["stopped"] in ("signal", "interrupted"):
        progress(f"stopped by signal: checkpoint at step {result['learner_steps']}, version {result['version']}")
    if as_json:
        print_json(result)
    else:
        start, end = (
            f"{r:.3f}" if isinstance(r, float) else "-" for r in (result["reward_start"], result["reward_end"])
        )
        typer.echo(f"done: {result['learner_steps']} steps, version {result['version']}, reward {start} -> {end}")
    if result["stopped"] == "interrupted":  # checkpointed and summarised; the exit code says Ctrl-C (130)
        raise Interrupted("interrupted")


def check_checkpoint_dir(path: Path) -> None:
    """A checkpoint directory that cannot be one fails before training, not after its steps."""
    if path.exists() and not path.is_dir():
        fail(f"--checkpoint-dir {path}: a file, not a directory; name a directory (created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--checkpoint-dir {path}: cannot create it ({exc.strerror})")
    if not os.access(path, os.W_OK):
        fail(f"--checkpoint-dir {path}: not writable")
