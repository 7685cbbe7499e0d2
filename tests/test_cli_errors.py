"""A new user's mistakes, driven through the real CLI as a subprocess: each ends in one clear `error:` line, the
documented exit code (`swarmnode.errors.ExitCode`), no traceback, and nothing announced to a swarm (no `ready`)."""

from __future__ import annotations

import json
import socket
import subprocess
import time

import pytest
from swarm_helpers import FAST_NET, LocalSwarm, swarmnode_cmd

from swarmnode.errors import ExitCode
from swarmnode.identity import Identity
from swarmnode.node.preflight import has_package

GHOST = f"/ip4/127.0.0.1/tcp/9/p2p/{Identity.generate().peer_id}"  # well-formed; nothing is dialled before the error


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        swarmnode_cmd(*args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def assert_one_clear_error(result: subprocess.CompletedProcess, code: ExitCode, *needles: str) -> str:
    """The command failed with `code`, said so on one `error:` line naming `needles`, and announced nothing."""
    err = result.stderr
    assert result.returncode == code, f"exit {result.returncode}, wanted {code}:\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    assert "ready" not in result.stdout, result.stdout
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def join(*args: str) -> subprocess.CompletedProcess:
    return run_cli("join", "--config", "tiny-cpu", "--initial-peers", GHOST, *args)


@pytest.mark.parametrize(
    "args, code, needles",
    [
        (
            ["--set", "task.name=math", "--set", "task.path=/nonexistent.jsonl"],
            ExitCode.MISSING,
            ["task.path", "/nonexistent.jsonl", "cannot read"],
        ),
        (["--set", "model.name=/nonexistent/model"], ExitCode.MISSING, ["model.name", "no such directory"]),
        (["--set", "model.name=not/a/model/id"], ExitCode.MISSING, ["not a Hugging Face model id"]),
        (["--set", "sampler.top_p=0.9"], ExitCode.USAGE, ["sampler.top_p", "only 1.0"]),
        (["--set", "sampler.temperature=hot"], ExitCode.USAGE, ["sampler.temperature", "'hot'"]),
        (["--set", "learner.loss_type=ppo"], ExitCode.USAGE, ["learner.loss_type", "'ppo' is not allowed"]),
        (["--set", "no_equals_sign"], ExitCode.USAGE, ["key=value"]),
    ],
    ids=["missing-task-file", "missing-model-dir", "bad-model-id", "top-p", "bad-type", "bad-choice", "bad-set"],
)
@pytest.mark.usefixtures("starts_processes")
def test_join_refuses_a_bad_config_before_joining(args, code, needles):
    assert_one_clear_error(join(*args), code, *needles)


@pytest.mark.usefixtures("starts_processes")
def test_unknown_preset_lists_the_presets():
    line = assert_one_clear_error(
        run_cli("join", "--config", "tiny-gpu", "--initial-peers", GHOST), ExitCode.USAGE, "'tiny-gpu'"
    )
    assert "tiny-cpu" in line and "qwen3-0.6b-math" in line  # the presets there are


@pytest.mark.skipif(has_package("datasets"), reason="the `datasets` package is installed here")
@pytest.mark.usefixtures("starts_processes")
def test_missing_datasets_package_names_the_install_command():
    # the README's own example: the preset reads an HF dataset, which needs the optional package
    result = run_cli("join", "--config", "qwen3-0.6b-math", "--set", "sampler.engine=hf", "--initial-peers", GHOST)
    assert_one_clear_error(result, ExitCode.MISSING, "datasets", "pip install")


@pytest.mark.skipif(has_package("vllm"), reason="vLLM is installed here")
@pytest.mark.usefixtures("starts_processes")
def test_missing_engine_names_the_extra_and_the_alternative(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n')
    result = run_cli("join", "--config", "qwen3-0.6b-math", "--set", f"task.path={data}", "--initial-peers", GHOST)
    assert_one_clear_error(result, ExitCode.MISSING, "vllm", "[vllm-cpu]", "sampler.engine=hf")


@pytest.mark.parametrize("peer", ["garbage", "/ip4/127.0.0.1/tcp/31337", "/ip4/127.0.0.1/tcp/31337/p2p/notapeer"])
@pytest.mark.usefixtures("starts_processes")
def test_garbage_initial_peers_is_a_usage_error(peer):
    for command in ("join", "status"):
        result = run_cli(command, "--config", "tiny-cpu", "--initial-peers", peer)
        assert_one_clear_error(result, ExitCode.USAGE, "initial peer", peer)


@pytest.mark.usefixtures("starts_processes")
def test_debug_shows_the_traceback():
    result = run_cli("--debug", "join", "--config", "tiny-gpu", "--initial-peers", GHOST)
    assert result.returncode == ExitCode.USAGE
    assert "Traceback" in result.stderr and "ConfigError" in result.stderr


@pytest.mark.usefixtures("starts_processes")
def test_second_bootstrap_on_a_port_in_use_is_refused(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    addr = f"/ip4/127.0.0.1/tcp/{port}"
    with LocalSwarm(tmp_path) as swarm:
        first = swarm.bootstrap(extra=["--host-maddrs", addr])
        result = run_cli(
            "bootstrap",
            *[a for s in FAST_NET for a in ("--set", s)],
            "--host-maddrs",
            addr,
            "--identity-path",
            str(tmp_path / "second.key"),
        )
        assert_one_clear_error(result, ExitCode.IN_USE, f"tcp port {port}", "already in use")
        assert first.popen.poll() is None  # the first one is untouched


@pytest.mark.slow  # CI: .ci/run
@pytest.mark.usefixtures("starts_processes")
def test_a_run_id_mismatch_is_named_by_status_and_the_bootstrap(tmp_path):
    # the trap: `bootstrap` without --config is run swarmnode-demo, nodes joined with --config tiny-cpu are tiny-demo
    with LocalSwarm(tmp_path, run_id="swarmnode-demo") as swarm:
        boot = swarm.bootstrap()
        node = swarm.join("sampler", role="sampler", extra=["--set", "run_id=tiny-demo"])
        result = run_cli("status", *[a for s in FAST_NET for a in ("--set", s)], "--initial-peers", swarm.initial_peers)
        assert result.returncode == ExitCode.FAILURE and "Traceback" not in result.stderr, result.stderr[-3000:]
        assert "error: " in result.stdout  # no learner: an error line, and the exit code says so
        assert "no nodes in run swarmnode-demo" in result.stdout and "tiny-demo (1 live)" in result.stdout, (
            result.stdout
        )

        def bootstrap_named_the_run() -> bool:
            docs = [json.loads(line) for line in boot.stdout().splitlines() if line.startswith("{")]
            return any(doc.get("other_runs", {}).get("tiny-demo", 0) > 0 for doc in docs)

        deadline = time.monotonic() + 60
        while not bootstrap_named_the_run():
            assert time.monotonic() < deadline, boot.stdout()[-2000:]
            time.sleep(0.5)
        # the node says what it refuses once, not on every heartbeat
        assert node.stderr().count("rejected DHT record: key is not one of this run's keys") <= 1, node.stderr()
        right = subprocess.run(
            swarmnode_cmd(
                "status",
                *[a for s in FAST_NET for a in ("--set", s)],
                "--json",
                "--set",
                "run_id=tiny-demo",
                "--initial-peers",
                swarm.initial_peers,
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "other_runs" not in json.loads(right.stdout)  # in the nodes' own run: no hint


def test_a_repeated_log_line_is_shown_once_per_window():
    import logging

    from swarmnode.cli_runtime import RepeatFilter

    def record(name: str, msg: str) -> logging.LogRecord:
        return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, (), None)

    shown = RepeatFilter(window=3600.0, windows={"quiet": 3600.0})
    assert [shown.filter(record("swarmnode.x", "same")) for _ in range(3)] == [True, False, False]
    assert shown.filter(record("swarmnode.x", "other")) and shown.filter(record("quiet", "same"))
    always = RepeatFilter(window=0.0, windows={})  # a zero window hides nothing
    assert all(always.filter(record("swarmnode.x", "same")) for _ in range(3))
