"""The `swarmnode` command line: one thin function per command (parse, build config, call into the package).

Every error of the package derives from `SwarmnodeError` and is caught once, in `main`: one line on stderr
(`error: ...`) and the error's exit code (`swarmnode.errors.ExitCode`), never a traceback for a user mistake;
`--debug` or `SWARMNODE_DEBUG=1` shows it. Ctrl-C ends a command with exit code 130.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

import typer

from swarmnode import __version__
from swarmnode.allocator import keep_freed_memory
from swarmnode.config import LEVEL_OF_ALGORITHM, NodeConfig, build_config, load_config
from swarmnode.config.addresses import check_initial_peers
from swarmnode.config.compat import held_warnings
from swarmnode.delay import DelaySpecError, parse_delay
from swarmnode.errors import ExitCode, Interrupted, SwarmnodeError
from swarmnode.local.swarm import MAX_DEMO_LEARNERS

# The command modules that start a node (join, idle, bootstrap, status, dashboard, local.trainer, and identity and
# preflight, which they share) import hivemind and torch: seconds before anything prints. Each command imports
# them itself, after its arguments and config are checked, so `--help`, `hardware`, a bad `--config` or `--set`
# and a malformed `--initial-peers` answer at once.

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # click's plain help: option text wraps at any width (rich cut it at 80 columns)
    help="swarmnode: decentralized RL post-training of LLMs over a peer-to-peer swarm.",
)

ConfigOpt = typer.Option(None, "--config", "-c", help="preset name (e.g. tiny-cpu) or YAML path")
SetOpt = typer.Option(None, "--set", "-s", help="override a config key, e.g. learner.cppo_beta=0.005 (repeatable)")
JsonOpt = typer.Option(False, "--json", help="print machine-readable JSON")
PeersOpt = typer.Option(None, "--initial-peers", help="bootstrap multiaddr(s), repeatable")
InviteArg = typer.Argument(
    None, help="the run's invite (swarmnode1:..., printed by `swarmnode host`)", show_default=False
)


DEBUG_ENV = "SWARMNODE_DEBUG"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"swarmnode {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="show tracebacks (also SWARMNODE_DEBUG=1)"),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    if debug:
        os.environ[DEBUG_ENV] = "1"


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    """End the command with one error line and `code` (printed by `main`)."""
    raise SwarmnodeError(message, exit_code=code)


def config_from_cli(config: str | None, overrides: list[str] | None, **extra: Any) -> NodeConfig:
    """Load the config, then apply `--set` overrides and any command-line flags given (not None); a malformed
    initial peer fails here too, before any heavy import."""
    with held_warnings():  # a config mistake or a missing model is said first, and alone
        cfg = load_config(config, cli_sets(overrides, **extra))
        check_initial_peers(cfg.network.initial_peers)
        model = Path(cfg.model.name).expanduser()
        if cfg.model.name.startswith((".", "/", "~")) and not model.is_dir():
            fail(f"model.name {cfg.model.name!r}: no such directory", ExitCode.MISSING)
    return cfg


def cli_sets(overrides: list[str] | None, **extra: Any) -> list[str]:
    """`--set` overrides plus one `key=value` per command-line flag given (not None)."""
    sets = list(overrides or [])
    for key, value in extra.items():
        if value is None or value == []:
            continue
        sets.append(f"{key}={json.dumps(value)}")
    return sets


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


RoleOpt = typer.Option(None, "--role", help="auto | sampler | learner (overrides the config's role)")


@app.command()
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
        _invite_config(invite, config, cli_sets(set_, role=role))
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


HostOpt = typer.Option(None, "--host-maddrs", help="listen multiaddr(s), repeatable (network.host_maddrs)")
AnnounceOpt = typer.Option(None, "--announce-maddrs", help="public multiaddr(s) to advertise, repeatable")
IdentityOpt = typer.Option(None, "--identity-path", help="key file (created 0600 on first use); keeps the peer id")
StartupOpt = typer.Option(None, "--startup-timeout", help="seconds to start p2pd and reach an initial peer")
MetricsPortOpt = typer.Option(
    None,
    "--metrics-port",
    min=0,
    max=65535,
    help="serve Prometheus /metrics on this port (0 = any free port; = metrics.port)",
)
PublicNameOpt = typer.Option(
    None, "--public-name", help="a name shown beside this node's key in status, the dashboard and the run page"
)


def _check_public_name(cfg) -> None:
    """The node's public name against the run's `names` policy: one line (exit code 2) before anything starts."""
    from swarmnode.protocol.public_name import NamePolicy, check_public_name

    check_public_name(cfg.public_name, NamePolicy.of(cfg.names))


BOOTSTRAP_MADDRS = ["/ip4/0.0.0.0/tcp/31337", "/ip4/0.0.0.0/udp/31337/quic-v1"]


def _network_flags(
    initial_peers=None, host_maddrs=None, announce_maddrs=None, identity_path=None, startup_timeout=None
) -> dict[str, Any]:
    return {
        "network.initial_peers": initial_peers,
        "network.host_maddrs": host_maddrs,
        "network.announce_maddrs": announce_maddrs,
        "network.identity_path": identity_path,
        "network.startup_timeout": startup_timeout,
    }


def _run_node_command(main) -> NoReturn:
    """Run a node (`join`, `bootstrap`) until it stops, then exit at once with its code. By then it has left
    cleanly (record withdrawn, checkpoint written, p2pd stopped, output flushed); the interpreter's own teardown
    (freeing torch and hivemind, no Python frame left) took 1-3.6 s more per stop on a loaded 2-core machine."""
    try:
        _run_swarm_command(main)
        code = int(ExitCode.OK)
    except Interrupted as exc:  # Ctrl-C: the same one line and exit code as `main` gives
        code = _report(exc)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _run_swarm_command(main, timeout: float | None = None) -> Any:
    """Run a swarm coroutine until it returns or Ctrl-C / SIGTERM (`swarmnode.cli_runtime.run_until_signal`)."""
    from swarmnode.cli_runtime import run_until_signal, setup_logging

    setup_logging()
    return run_until_signal(main, timeout)


@app.command()
def join(
    invite: str | None = InviteArg,
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    initial_peers: list[str] | None = PeersOpt,
    role: str | None = typer.Option(None, "--role", help="auto | sampler | learner"),
    host_maddrs: list[str] | None = HostOpt,
    announce_maddrs: list[str] | None = AnnounceOpt,
    identity_path: str | None = IdentityOpt,
    startup_timeout: float | None = StartupOpt,
    simulate_delay: str | None = typer.Option(
        None,
        "--simulate-delay",
        help="hold back deliveries: fixed:S | lognormal:MU,SIGMA[,MAX] | weibull:SCALE,SHAPE[,MAX]",
    ),
    idle: bool = typer.Option(False, "--idle", help="only advertise the role (no model, no work): a network check"),
    metrics_port: int | None = MetricsPortOpt,
    public_name: str | None = PublicNameOpt,
    insecure_accept_any_learner: bool = typer.Option(
        False,
        "--insecure-accept-any-learner",
        help="with no trust.learner_keys, load weights from whichever key announces them (local tests only)",
    ),
) -> None:
    """Join a run's swarm (by its invite, or every setting by hand) and work as a sampler or learner."""
    flags = {
        "role": role,
        "sync.simulate_delay": simulate_delay,
        "metrics.port": metrics_port,
        "trust.accept_any_learner": insecure_accept_any_learner or None,
        "public_name": public_name,
        **_network_flags(initial_peers, host_maddrs, announce_maddrs, identity_path, startup_timeout),
    }
    cfg, card = _config_and_card(invite, config, set_, flags)
    _check_public_name(cfg)
    if not cfg.network.initial_peers:
        fail("join needs --initial-peers (the address `swarmnode bootstrap` prints)")
    from swarmnode.config.trust import check_trust_root
    from swarmnode.node.preflight import check_node, check_peer_addresses, check_ports

    check_ports(cfg.network.host_maddrs)
    if card is not None and not idle:
        from swarmnode.node.invite import check_sources

        check_sources(cfg, card)  # the run's model and task data, not only its settings
    if not idle:
        check_node(cfg)  # task, engine, model: before the swarm hears of this node
    check_peer_addresses(cfg)
    if not idle:
        check_trust_root(cfg)
    from swarmnode.identity import identity_for
    from swarmnode.node.idle import run_idle
    from swarmnode.node.join import run_node

    identity = identity_for(cfg, "identity.key")
    if idle:
        _run_node_command(lambda stop: run_idle(cfg, identity, cfg.role, stop, emit=_emit, card=card))
    else:
        _run_node_command(lambda stop: run_node(cfg, identity, stop, emit=_emit, card=card))


@app.command()
def identity(
    identity_path: str = typer.Option(..., "--identity-path", help="the key file (created if missing)"),
) -> None:
    """Print the peer id of an identity key file: what samplers list in trust.learner_keys for a learner."""
    from swarmnode.identity import Identity

    typer.echo(Identity.load_or_create(identity_path).peer_id)


@app.command()
def bootstrap(
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    as_json: bool = JsonOpt,
    host_maddrs: list[str] | None = HostOpt,
    announce_maddrs: list[str] | None = AnnounceOpt,
    identity_path: str | None = IdentityOpt,
    startup_timeout: float | None = StartupOpt,
    initial_peers: list[str] | None = PeersOpt,
    log_interval: float = typer.Option(30.0, "--log-interval", min=0.1, help="seconds between health logs"),
    metrics_port: int | None = MetricsPortOpt,
    card: str | None = typer.Option(None, "--card", hidden=True, help="keep this run card file in the DHT"),
) -> None:
    """Host a long-lived bootstrap DHT peer for a run."""
    cfg = config_from_cli(
        config,
        set_,
        **{"metrics.port": metrics_port},
        **_network_flags(
            initial_peers, host_maddrs or BOOTSTRAP_MADDRS, announce_maddrs, identity_path, startup_timeout
        ),
    )
    from swarmnode.node.preflight import check_peer_addresses, check_ports

    check_peer_addresses(cfg)
    check_ports(cfg.network.host_maddrs)
    from swarmnode.identity import identity_for
    from swarmnode.node.bootstrap import run_bootstrap

    identity = identity_for(cfg, "bootstrap.key")
    _run_node_command(
        lambda stop: run_bootstrap(
            cfg, identity, stop, as_json=as_json, log_interval=log_interval, emit=_emit, card=card and Path(card)
        )
    )


@app.command()
def host(
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    host_maddrs: list[str] | None = typer.Option(
        None,
        "--host-maddrs",
        help="the bootstrap's listen multiaddr(s), repeatable (default: the config's, or port 31337)",
    ),
    owner_key: str | None = typer.Option(
        None,
        "--owner-key",
        help="the run owner's key file (created if missing; default <data dir>/owner.key): it signs the run card",
    ),
    bootstrap_only: bool = typer.Option(
        False,
        "--bootstrap-only",
        help="start the bootstrap and publish the card only (the learner joins elsewhere; needs trust.learner_keys)",
    ),
    public_name: str | None = PublicNameOpt,
    update: bool = typer.Option(
        False,
        "--update",
        help="sign the next card version with the --set shared "
        "settings changed; the running nodes take it within two heartbeats",
    ),
) -> None:
    """Host a run: a bootstrap and a learner, the run's signed card, and one invite line (`swarmnode join ...`)."""
    set_ = cli_sets(set_, public_name=public_name)  # the learner's name (and the bootstrap's)
    cfg = config_from_cli(config, set_)
    _check_public_name(cfg)
    from swarmnode.node.host import default_owner_key, run_host, update_card

    key = Path(owner_key).expanduser() if owner_key else default_owner_key()
    if update:
        update_card(config, list(set_ or []), key, _emit)
        return
    maddrs = host_maddrs or (
        cfg.network.host_maddrs if "host_maddrs" in cfg.network.model_fields_set else BOOTSTRAP_MADDRS
    )
    from swarmnode.node.preflight import check_ports

    check_ports(maddrs)
    run_host(
        config, list(set_ or []), owner_key=key, bootstrap_only=bootstrap_only, bootstrap_maddrs=maddrs, emit=_emit
    )


def _emit(line: str) -> None:
    typer.echo(line)
    sys.stdout.flush()


def _client_config(command: str, config, set_, initial_peers, host_maddrs, startup_timeout, invite=None):
    """The config of a read-only client command (status, dashboard): loopback listener unless told otherwise; with
    an invite, the run's card too (config and card; card None without one)."""
    flags = _network_flags(initial_peers, host_maddrs or ["/ip4/127.0.0.1/tcp/0"], None, None, startup_timeout)
    cfg, card = _config_and_card(invite, config, set_, flags)
    if not cfg.network.initial_peers:
        fail(f"{command} needs an invite or --initial-peers (the address `swarmnode bootstrap` prints)")
    from swarmnode.node.preflight import check_peer_addresses

    check_peer_addresses(cfg)
    return cfg, card


def _invite_config(invite: str, config: str | None, sets: list[str]):
    """The node's config and the run card from an invite (`swarmnode.node.invite.config_for_invite`). A damaged
    invite or a bad --config/--set answers first, before the dial's modules (hivemind, torch) are imported."""
    from swarmnode.protocol.run_card import Invite

    Invite.parse(invite)
    load_config(config, sets)
    from swarmnode.node.invite import config_for_invite

    return config_for_invite(invite, config, sets)


def _config_and_card(invite: str | None, config: str | None, set_: list[str] | None, flags: dict):
    """(config, run card) from an invite, or (config, None) from --config/--set and the flags alone."""
    if invite is not None:
        return _invite_config(invite, config, cli_sets(set_, **flags))
    return config_from_cli(config, set_, **flags), None


@app.command()
def status(
    invite: str | None = InviteArg,
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    initial_peers: list[str] | None = PeersOpt,
    as_json: bool = JsonOpt,
    host_maddrs: list[str] | None = HostOpt,
    startup_timeout: float | None = StartupOpt,
    self_: bool = typer.Option(
        False,
        "--self",
        help="this machine's node only, from its data directory, "
        "in one line; exit 0 contributing, 1 idle, 2 failing, 3 no node found",
    ),
    on_alert: str | None = typer.Option(
        None,
        "--on-alert",
        help="with --self: shell command run when the node's state changes (SWARMNODE_ALERT_* in its environment)",
    ),
    watch: float | None = typer.Option(None, "--watch", min=1, help="with --self: check every N s"),
    page: int = typer.Option(1, "--page", min=1, help="a large run's page of peers, the worst first"),
    exact: bool = typer.Option(False, "--exact", help="read every peer record, however many"),
) -> None:
    """The run's health: peers (role, version, lag, last seen), newest version, alerts; --json: schema v2 (docs/status-and-metrics.md)."""
    if self_ or on_alert or watch:
        _self_status(config, set_, as_json, on_alert, watch)
    cfg, card = _client_config("status", config, set_, initial_peers, host_maddrs, startup_timeout, invite)
    from swarmnode.observe.status import format_status, query_status

    doc = _run_swarm_command(lambda stop: query_status(cfg, exact), timeout=cfg.network.startup_timeout + 30)
    if card is not None:
        from swarmnode.observe.card_view import format_card, with_card

        doc = with_card(doc, card)
    if as_json:
        print_json(doc)
    else:
        typer.echo("\n".join([*([format_card(doc["card"])] if card is not None else []), format_status(doc, page - 1)]))
        if any(alert["severity"] == "error" for alert in doc["alerts"]):  # an `error:` line: not a 0 exit
            raise typer.Exit(int(ExitCode.FAILURE))


def _self_status(config, set_, as_json: bool, on_alert: str | None, watch: float | None) -> NoReturn:
    """`status --self`: the local node's one-line answer and its exit code (docs/status-and-metrics.md)."""
    from pathlib import Path

    from swarmnode.config import default_data_dir
    from swarmnode.observe.self_status import run_self_status

    cfg = config_from_cli(config, set_)
    raise typer.Exit(
        run_self_status(
            Path(cfg.resolved_data_dir()),
            bool(cfg.data_dir),
            as_json=as_json,
            on_alert=on_alert,
            watch=watch,
            echo=typer.echo,
            home=default_data_dir(),
        )
    )


@app.command()
def dashboard(
    invite: str | None = InviteArg,
    config: str | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
    initial_peers: list[str] | None = PeersOpt,
    host_maddrs: list[str] | None = HostOpt,
    startup_timeout: float | None = StartupOpt,
    refresh: float = typer.Option(3.0, "--refresh", min=0.5, max=600, help="seconds between polls"),
    once: bool = typer.Option(False, "--once", help="draw one view and exit"),
    web: str | None = typer.Option(
        None,
        "--web",
        help="serve the run page at ADDR:PORT (read-only; JSON at /status.json) instead of the terminal view",
    ),
) -> None:
    """A live terminal view of a run's swarm health (q or Ctrl-C quits), or the run page in a browser (`--web`)."""
    if web is not None:
        from swarmnode.web.run import parse_address

        address = parse_address(web)
    cfg, card = _client_config("dashboard", config, set_, initial_peers, host_maddrs, startup_timeout, invite)
    if web is not None:
        from swarmnode.web.run import run_web

        try:
            _run_swarm_command(lambda stop: run_web(cfg, stop, address, refresh=refresh, card=card, emit=_emit))
        except Interrupted:
            pass
        return
    from swarmnode.observe.dashboard import run_dashboard

    try:
        _run_swarm_command(lambda stop: run_dashboard(cfg, stop, refresh=refresh, once=once, card=card))
    except Interrupted:  # Ctrl-C is the view's documented way out, as q is: exit code 0
        pass


@app.command()
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


@app.command("train-local")
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
    cfg = config_from_cli(config, set_, **{"learner.importance_sampling_level": LEVEL_OF_ALGORITHM.get(algorithm)})
    try:
        delay_model = parse_delay(delay)
    except DelaySpecError as exc:
        fail(str(exc).replace("--simulate-delay", "--delay"))
    if checkpoint_dir is not None:
        _check_checkpoint_dir(Path(checkpoint_dir).expanduser())
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


@app.command()
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
        cfg, card = _client_config("export", config, set_, None, None, startup_timeout, source)
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


@app.command("eval")
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


def _check_checkpoint_dir(path: Path) -> None:
    """A checkpoint directory that cannot be one fails before training, not after its steps."""
    if path.exists() and not path.is_dir():
        fail(f"--checkpoint-dir {path}: a file, not a directory; name a directory (created if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--checkpoint-dir {path}: cannot create it ({exc.strerror})")
    if not os.access(path, os.W_OK):
        fail(f"--checkpoint-dir {path}: not writable")


def main() -> None:
    """Console-script entry point: run the command; every error ends here as one line and its exit code."""
    from swarmnode.cli_runtime import exit_zero_on_sigterm

    exit_zero_on_sigterm()  # until a command's loop takes SIGTERM over (the console script's imports ran already)
    signal.signal(signal.SIGINT, _interrupt)  # not KeyboardInterrupt, which click would turn into exit code 1
    keep_freed_memory()  # before any model is loaded: generation's growing buffers stop faulting pages back in
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no loading bars in a node's output (=0: shown)
    try:
        plain_metavars(typer.main.get_command(app))()
    except SwarmnodeError as exc:
        sys.exit(_report(exc))


def plain_metavars(command: Any) -> Any:
    """`--config CONFIG` in --help rather than typer's `--config <str>` (its type tags); the command returned."""
    for sub in [command, *getattr(command, "commands", {}).values()]:
        for param in sub.params:
            if not getattr(param, "is_flag", False) and param.param_type_name in ("option", "argument"):
                param.metavar = param.name.rstrip("_").upper()
    return command


def _interrupt(signum: int, frame: Any) -> NoReturn:
    raise Interrupted("interrupted")


def _report(exc: SwarmnodeError) -> int:
    """Print `exc` as one line (a traceback too when debugging) and return its exit code."""
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        traceback.print_exception(exc)
    if exc.exit_code == ExitCode.INTERRUPTED:
        typer.echo(str(exc) or "interrupted", err=True)
    else:
        typer.echo(f"error: {exc}", err=True)
    return int(exc.exit_code)
