"""What a new user tripped over, each fixed: help that wraps instead of cutting option text, presets that say what
to install first, the bootstrap's shareable address first (unrouted ones last), learner keys checked when read
(tests/test_run_card.py), status's error line with a non-zero exit (tests/test_cli_errors.py), quiet start-up
(tests/test_host_invite.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from swarmnode.node.bootstrap import share_addresses

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path = REPO, columns: int = 80) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swarmnode", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(REPO)})


def test_help_wraps_option_text_at_80_columns_and_shows_no_type_tags():
    out = run("join", "--help").stdout
    assert "--insecure-accept-any-learner" in out and "…" not in out
    assert "whichever key announces them" in " ".join(out.split())  # wrapped, not cut
    options = out.split("Options:", 1)[1]
    assert "<str>" not in options and "<bool>" not in options and "<list[str]>" not in options
    assert "--config CONFIG" in options and "--idle " in options


def test_a_preset_whose_model_is_not_installed_says_the_one_command_that_installs_it(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "packaged.yaml").write_text("model:\n  name: pkg:swarmnode_no_such_pkg/m.gguf\n")
    code = ("from swarmnode.node.preset_fit import missing_install; "
            "print(missing_install('packaged')); print(missing_install('tiny-cpu'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["pip install --no-deps <the package providing swarmnode_no_such_pkg>",
                                        "None"], done.stdout


def test_the_bootstrap_prints_a_shareable_address_first_and_unrouted_ones_last():
    peer = "/p2p/12D3KooWFqCkwozuivmdDoCZAqW8aPcPrjHLXMD8wpfSWAeVKgjD"
    found = [f"/ip4/192.0.2.7/tcp/31337{peer}", f"/ip4/127.0.0.1/tcp/31337{peer}", f"/ip4/10.1.2.3/tcp/31337{peer}",
             f"/ip4/169.254.1.1/tcp/31337{peer}"]
    assert share_addresses(found, []) == [found[2], found[1], found[0], found[3]]


def test_a_sapo_node_prints_progress_lines_and_a_summary():
    from swarmnode.node.sapo.role import PROGRESS_EVERY_S, SapoProgress

    lines: list[str] = []
    progress = SapoProgress(lines.append)
    record = {"step": 1, "own_reward": 0.25, "step_external_groups": 3, "external_groups": 3, "groups_received": 5,
              "groups_sent": 4, "local_groups": 4}
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
