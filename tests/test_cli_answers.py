"""The CLI says no at once and speaks plainly: a bad argument or config is refused before torch, transformers or
hivemind is imported; the demo's summary has no Python reprs; `--json` prints JSON alone on stdout."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swarmnode.errors import ExitCode
from swarmnode.local.demo import format_summary

HEAVY = ("torch", "transformers", "hivemind")
NOT_A_PEER = "/ip4/127.0.0.1/tcp/31337/p2p/notapeer"


def _run(*args: str, importtime: bool = False) -> subprocess.CompletedProcess:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run(
        [sys.executable, *flags, "-m", "swarmnode", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def _imported(stderr: str) -> set[str]:
    """Top-level packages named in `python -X importtime`'s report."""
    lines = [line for line in stderr.splitlines() if line.startswith("import time:")]
    return {line.split("|")[-1].strip().split(".")[0] for line in lines}


@pytest.mark.parametrize(
    "args, needle",
    [
        (["join", "--initial-peers", "garbage"], "initial peer 'garbage'"),
        (["join", "--config", "tiny-cpu", "--initial-peers", NOT_A_PEER], "is not a peer id"),
        (
            ["join", "--config", "tiny-cpu", "--set", "sampler.temperature=hot", "--initial-peers", "garbage"],
            "sampler.temperature",
        ),
        (["status", "--initial-peers", "/ip4/127.0.0.1/tcp/31337"], "not a multiaddr ending in /p2p/"),
        (["dashboard", "--initial-peers", "garbage"], "initial peer"),
        (["bootstrap", "--initial-peers", "garbage"], "initial peer"),
        (["demo", "--set", "learner.beta=-1"], "learner.beta"),
        (["hardware", "--set", "no_equals_sign"], "key=value"),
        (["train-local", "--algorithm", "ppo"], "--algorithm 'ppo'"),
        (["join", "swarmnode1:garbage"], "the invite is damaged"),
        (["hardware", "swarmnode1:garbage"], "the invite is damaged"),
        (["status", "swarmnode1:garbage"], "the invite is damaged"),
    ],
    ids=[
        "join-garbage",
        "join-not-a-peer-id",
        "join-bad-set",
        "status-no-p2p",
        "dashboard",
        "bootstrap",
        "demo-set",
        "hardware-set",
        "train-local-algorithm",
        "join-typoed-invite",
        "hardware-typoed-invite",
        "status-typoed-invite",
    ],
)
@pytest.mark.usefixtures("starts_processes")
def test_a_mistake_is_refused_before_any_heavy_import(args, needle):
    done = _run(*args, importtime=True)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == ExitCode.USAGE and len(errors) == 1 and needle in errors[0], done.stderr[-3000:]
    assert not _imported(done.stderr) & set(HEAVY), sorted(_imported(done.stderr) & set(HEAVY))


@pytest.mark.usefixtures("starts_processes")
def test_identity_prints_the_peer_id_without_a_heavy_import(tmp_path):
    done = _run("identity", "--identity-path", str(tmp_path / "k.key"), importtime=True)
    assert done.returncode == 0 and done.stdout.startswith("12D3KooW"), done.stderr[-2000:]
    assert not _imported(done.stderr) & set(HEAVY), sorted(_imported(done.stderr) & set(HEAVY))


@pytest.mark.usefixtures("starts_processes")
def test_the_old_loss_type_flag_warns_and_still_works():
    done = _run("train-local", "--loss-type", "ppo")
    assert done.returncode == ExitCode.USAGE
    assert "--loss-type is now --algorithm" in done.stderr and "--loss-type 'ppo'" in done.stderr


@pytest.mark.usefixtures("starts_processes")
def test_hardware_json_is_json_alone():
    done = _run("hardware", "--config", "tiny-cpu", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert isinstance(json.loads(done.stdout), dict)


def test_the_demo_summary_reads_as_sentences():
    summary = {
        "learner_steps": 300,
        "versions_published": 300,
        "reward_start": 0.3604,
        "reward_end": 0.4243,
        "reward_gain": 0.078,
        "reward_trend_t": 8.6,
        "staleness_max": 7,
        "staleness_mean": 2.2767,
        "rollouts_received": 2400,
        "dropped_stale": 0,
        "staleness_hist": {"0": 41, "1": 544, "2-3": 1566},
        "wall_seconds": 356.2,
        "reward_curve": [0.35, 0.36, 0.42],
        "stopped": "steps",
        "sampler_killed_at_step": None,
        "learners": {
            "learner": {
                "steps": 300,
                "version": 300,
                "averaging_rounds": 0,
                "averaging_failures": 0,
                "reward_end": 0.4243,
            }
        },
        "samplers": {
            "sampler1": {"steps": 241, "first_step": 1, "last_step": 300},
            "sampler2": {"steps": 0, "first_step": None, "last_step": None},
        },
        "node_pids": [11, 12],
        "workdir": None,
    }
    text = format_summary(summary)
    for repr_mark in ("{", "}", "[", "]", "None"):
        assert repr_mark not in text, text
    assert "300 learner steps" in text and "0.360 -> 0.424" in text and "2-3: 1566" in text
    assert "sampler2: its groups trained 0 learner steps (none)" in text
    assert "work dir" not in text  # removed at the end: nothing to point at


@pytest.mark.usefixtures("starts_processes")
def test_the_public_names_resolve_and_import_swarmnode_stays_light():
    import swarmnode

    for name in swarmnode.__all__:
        assert getattr(swarmnode, name) is not None, name
    code = "import sys, swarmnode; print(sorted(m for m in ('torch', 'transformers', 'hivemind') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"`import swarmnode` imported {out}"
