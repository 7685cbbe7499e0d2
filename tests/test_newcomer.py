"""A newcomer's first hour (issue 60): what a first run hits answers plainly, at once, in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from swarmnode.errors import ExitCode


def _swarmnode(*args: str, home=None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"SWARMNODE_HOME": str(home)} if home else {})}
    return subprocess.run(
        [sys.executable, "-m", "swarmnode", *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=env,
    )


@pytest.mark.usefixtures("starts_processes")
def test_train_local_json_is_json_alone_with_the_warm_start_on_stderr(tmp_path):
    done = _swarmnode(
        "train-local",
        "--config",
        "tiny-cpu",
        "--json",
        "--steps",
        "1",
        "--set",
        "model.tiny.warm_start_steps=2",
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["learner_steps"] == 1
    assert "warm-starting the tiny model" in done.stderr


@pytest.mark.usefixtures("starts_processes")
def test_a_checkpoint_dir_that_is_a_file_fails_before_training(tmp_path):
    (tmp_path / "taken").write_text("")
    done = _swarmnode("train-local", "--config", "tiny-cpu", "--checkpoint-dir", str(tmp_path / "taken"))
    errors = done.stderr.strip().splitlines()
    assert done.returncode == ExitCode.USAGE and len(errors) == 1, done.stderr[-2000:]
    assert "a file, not a directory" in errors[0] and "Traceback" not in done.stderr


def test_hardware_of_a_run_that_names_its_learners_says_sampler_as_join_does(tmp_path):
    from swarmnode.config import load_config
    from swarmnode.identity import Identity
    from swarmnode.node.hardware import hardware_report

    mine, host = Identity.load_or_create(tmp_path / "me.key"), Identity.generate()
    sets = [f"network.identity_path={tmp_path / 'me.key'}"]
    other = hardware_report(load_config("tiny-cpu", [*sets, f"trust.learner_keys=[{host.peer_id}]"]))
    assert other["role"] == "sampler" and "designated learners" in other["reasons"][-1], other["reasons"]
    assert not any("learner count unknown" in reason for reason in other["reasons"])
    designated = hardware_report(load_config("tiny-cpu", [*sets, f"trust.learner_keys=[{mine.peer_id}]"]))
    assert designated["role"] == "learner", designated["reasons"]


def _node_record(where, peer_id: str, role: str = "sampler") -> None:
    from swarmnode.observe.self_record import SelfRecord

    where.mkdir(parents=True, exist_ok=True)
    SelfRecord(where, peer_id=peer_id, role=role, run_id=where.parent.name, heartbeat=2.0).update({}, force=True)


def test_status_self_without_the_run_id_names_the_runs_it_found(tmp_path):
    from swarmnode.observe.self_status import run_self_status

    _node_record(tmp_path / "invited-run" / "12D3KooWsampler", "12D3KooWsampler")
    lines: list[str] = []
    code = run_self_status(
        tmp_path / "default-run", False, as_json=False, on_alert=None, watch=None, echo=lines.append, home=tmp_path
    )
    assert code == 3 and len(lines) == 1, lines
    assert "run invited-run" in lines[0] and "--set run_id=invited-run" in lines[0], lines


def test_status_self_answers_for_each_running_node_of_the_run_naming_its_peer(tmp_path):
    from swarmnode.observe.self_status import run_self_status

    _node_record(tmp_path / "run" / "12D3KooWlearner", "12D3KooWlearner", "learner")
    _node_record(tmp_path / "run" / "12D3KooWsampler", "12D3KooWsampler")
    lines: list[str] = []
    code = run_self_status(
        tmp_path / "run", False, as_json=False, on_alert=None, watch=None, echo=lines.append, home=tmp_path
    )
    assert code == 1 and len(lines) == 2, lines  # both starting: idle
    assert {line.split()[0] for line in lines} == {"learner", "sampler"}
    assert any("12D3KooWlearner" in line for line in lines) and any("12D3KooWsampler" in line for line in lines)


def test_a_sampler_paused_by_a_wrong_learner_key_names_the_live_learner():
    from swarmnode.node.roles.sampler_role import no_learner_line

    assert "no learner of the run is live" in no_learner_line([])
    said = no_learner_line(["12D3KooWlive"])
    assert "learner 12D3KooWlive is live but not in trust.learner_keys" in said, said
    assert "no learner of the run is live" not in said


def test_a_restarted_host_listens_where_its_bootstrap_listened_before(tmp_path):
    from swarmnode.node.host import HostFiles

    files = HostFiles(tmp_path)
    files.root.mkdir(parents=True, exist_ok=True)
    listen = ["/ip4/127.0.0.1/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1", "/ip4/0.0.0.0/tcp/31337"]
    assert files.pinned(listen) == listen  # a first start: any port
    peer = "12D3KooWBootstrap"
    printed = [f"/ip4/127.0.0.1/tcp/40123/p2p/{peer}", f"/ip4/10.0.0.2/udp/40555/quic-v1/p2p/{peer}"]
    files.pin(listen, printed)
    assert files.pinned(listen) == ["/ip4/127.0.0.1/tcp/40123", "/ip4/0.0.0.0/udp/40555/quic-v1", listen[2]]


def test_a_node_whose_bootstraps_are_all_gone_says_so_once_and_again_when_one_is_back():
    from swarmnode.swarm.bootstrap_watch import GONE_AFTER_S, BootstrapWatch

    now = [0.0]
    watch = BootstrapWatch(clock=lambda: now[0])
    assert watch.seen(1, 1) is None
    said = []
    for _ in range(10):
        now[0] += GONE_AFTER_S / 4
        said.append(watch.seen(0, 2))
    gone = [line for line in said if line]
    assert len(gone) == 1 and "none of the run's 2 bootstraps has answered" in gone[0], said
    assert "new invite" in gone[0]
    assert "answers again" in (watch.seen(1, 2) or "") and watch.seen(1, 2) is None


def test_a_key_typo_names_the_close_match_and_a_yaml_error_its_line(tmp_path):
    import pytest

    from swarmnode.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"learner.learnin_rate: unknown key: did you mean learner.learning_rate\?"):
        load_config("tiny-cpu", ["learner.learnin_rate=1e-5"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("learner:\n  learning_rate: 1e-5\n  beta: [0.1\n")
    with pytest.raises(ConfigError, match=r"cannot read YAML \(line 4, column 1: expected ','"):
        load_config(str(bad))


@pytest.mark.usefixtures("starts_processes")
def test_a_missing_model_directory_is_said_first_and_alone():
    done = _swarmnode("train-local", "--set", "model.name=./no-such-model", "--set", "learner.learning_rate=1e-3")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == ExitCode.MISSING and lines == ["error: model.name './no-such-model': no such directory"]
    advised = _swarmnode("hardware", "--set", "model.name=Qwen/Qwen3-0.6B", "--set", "learner.learning_rate=1e-3")
    assert advised.returncode == 0 and "far above the usual" in advised.stderr  # the advice itself still comes


def test_the_docs_state_the_status_schema_version_and_the_quick_start_is_install_then_demo():
    import re
    from pathlib import Path

    from swarmnode.observe.status_schema import STATUS_SCHEMA_VERSION

    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs" / "status-and-metrics.md").read_text()
    assert f"| `schema_version` | `{STATUS_SCHEMA_VERSION}`;" in doc and f"Version {STATUS_SCHEMA_VERSION}:" in doc
    readme = (root / "README.md").read_text()
    quick = re.search(r"## Quick start.*?```bash\n(.*?)```", readme, re.S)
    assert quick is not None
    lines = quick.group(1).strip().splitlines()
    # two commands: one installs and runs the demo, one runs the tests (the second does not install again)
    assert lines == ['pip install torch==2.13.0 && pip install -e ".[dev]" && swarmnode demo', "python -m pytest -q"]
    install = readme[quick.end() : readme.index("## Host a run")]
    assert "iptables" in install  # the NAT lab's tests skip without it: the install says so


def test_the_models_page_says_what_a_smollm2_run_costs_and_how_long_a_rise_takes():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "models.md").read_text()
    table = page[page.index("| what | figure | command |") :].split("\n\n")[0].splitlines()
    assert len(table) > 3 and all(row.count("|") == 4 for row in table), table  # a filled table, not an empty one
    assert "~45 minutes" in page and "--minutes 45" in page


def test_samplers_paused_with_no_learner_add_no_throughput_and_show_why():
    from swarmnode.observe.dashboard_view import _throughput
    from swarmnode.observe.health import swarm_summary

    paused = {"tokens_per_s": 1272.0, "rollouts_per_s": 0.5, "paused": "no learner"}
    peers = [
        {"peer_id": "a", "role": "sampler", "version": 3, "health": dict(paused)},
        {"peer_id": "b", "role": "sampler", "version": 3, "health": dict(paused)},
    ]
    summary = swarm_summary(peers)
    assert summary["tokens_per_s"] == 0.0 and summary["rollouts_per_s"] == 0.0, summary
    assert _throughput(peers[0]) == "paused: no learner"


@pytest.mark.usefixtures("starts_processes")
def test_a_p2pd_failing_after_ctrl_c_is_an_interruption_not_a_retried_failure():
    import asyncio
    import logging

    import pytest

    from swarmnode.config import load_config
    from swarmnode.errors import Interrupted
    from swarmnode.identity import Identity
    from swarmnode.swarm import p2p

    cfg = load_config("tiny-cpu", ["network.host_maddrs=[/ip4/127.0.0.1/tcp/notaport]"])  # p2pd refuses it
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("swarmnode.swarm.p2p").addHandler(handler)
    p2p.STOP_REQUESTED.set()
    try:
        with pytest.raises(Interrupted):
            asyncio.run(p2p.start_p2p(cfg.network, Identity.generate()))
    finally:
        p2p.STOP_REQUESTED.clear()
        logging.getLogger("swarmnode.swarm.p2p").removeHandler(handler)
    assert not [r for r in records if "failed" in r.getMessage()], [r.getMessage() for r in records]


def test_math_verify_off_the_main_thread_says_nothing_about_its_timeouts():
    import logging
    import threading

    import math_verify.grader
    import math_verify.parser

    from swarmnode.tasks.math_problems import math_verify_reward

    math_verify.parser.TIMEOUT_WARNING_SHOWN = math_verify.grader.TIMEOUT_WARNING_SHOWN = False
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    rewards: list[float] = []
    try:
        worker = threading.Thread(target=lambda: rewards.append(math_verify_reward("so \\boxed{12}", "12")))
        worker.start()
        worker.join()
    finally:
        logging.getLogger().removeHandler(handler)
    assert rewards == [1.0]
    assert not [r.getMessage() for r in records if "Timeout is disabled" in r.getMessage()]


def test_a_nodes_log_lines_read_as_its_printed_ones_without_timestamps():
    import logging

    from swarmnode.cli_runtime import PlainFormatter

    def line(level: int, message: str) -> str:
        return PlainFormatter().format(logging.LogRecord("swarmnode.x", level, __file__, 1, message, None, None))

    assert line(logging.INFO, "initial peer back") == "initial peer back"
    assert line(logging.WARNING, "no answer") == "warning: no answer"
