"""Samplers load weights only from the run's designated learners (`trust.learner_keys`): a sampler with none
is refused before it joins, and a learner not among the keys never gets its weights loaded (real bootstrap,
learner and sampler processes on 127.0.0.1)."""

from __future__ import annotations

import subprocess
import time

import pytest
from swarm_helpers import LocalSwarm, swarmnode_cmd

from swarmnode.errors import ExitCode
from swarmnode.identity import Identity

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

WORK = ["--config", "tiny-cpu", "--set", "model.tiny.warm_start_steps=20"]
GHOST = "/ip4/127.0.0.1/tcp/9/p2p/12D3KooWSHq2jg4cGP3q2XKjR1HNNDbCwNsNHuS8NTPVdFbmCGsK"


@pytest.mark.parametrize("role", ["sampler", "auto"])
def test_a_node_that_may_sample_needs_learner_keys(role):
    result = subprocess.run(
        swarmnode_cmd("join", "--config", "tiny-cpu", "--role", role, "--initial-peers", GHOST),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.returncode == ExitCode.USAGE and "ready" not in result.stdout, result.stderr[-2000:]
    assert len(errors) == 1 and "trust.learner_keys is empty" in errors[0], result.stderr[-2000:]
    assert "--insecure-accept-any-learner" in errors[0] and "Traceback" not in result.stderr


def test_a_sapo_node_needs_no_learner_keys():
    """The README's SAPO command (`join --set mode=sapo`, role auto): every node trains its own policy and loads
    nobody's weights, so the trust-root check lets it through (here it then fails to reach the ghost peer)."""
    result = subprocess.run(
        swarmnode_cmd(
            "join", "--config", "tiny-cpu", "--set", "mode=sapo", "--initial-peers", GHOST, "--startup-timeout", "5"
        ),
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert "learner_keys" not in result.stderr and result.returncode != ExitCode.USAGE, result.stderr[-2000:]
    assert result.returncode == ExitCode.NETWORK, (result.returncode, result.stderr[-2000:])


def test_identity_prints_the_peer_id_samplers_list(tmp_path):
    key = tmp_path / "learner.key"
    out = subprocess.run(
        swarmnode_cmd("identity", "--identity-path", str(key)), capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    assert out == Identity.load_or_create(key).peer_id


@pytest.mark.slow  # three working nodes: about a minute alone, three under load
def test_weights_of_a_learner_not_designated_are_never_loaded(tmp_path):
    """Two samplers beside one learner: one trusts it and loads its versions (so this test can fail), the other
    trusts only another key and never fetches anything from it, while it keeps training."""
    stranger = Identity.generate().peer_id  # the only learner the second sampler trusts (not running)
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        swarm.join("learner", "learner", work=True, extra=[*WORK, "--set", f"data_dir={tmp_path / 'learner'}"])
        swarm.join("trusting", "sampler", work=True, extra=[*WORK, "--set", f"data_dir={tmp_path / 'trusting'}"])
        wary = swarm.join(
            "wary",
            "sampler",
            work=True,
            extra=[*WORK, "--set", f"data_dir={tmp_path / 'wary'}", "--set", f"trust.learner_keys=[{stranger}]"],
        )
        ids = {
            name: Identity.load_or_create(tmp_path / f"{name}.key").peer_id for name in ("learner", "trusting", "wary")
        }
        deadline = time.monotonic() + 240
        while True:
            peers = {p["peer_id"]: p for p in swarm.status()["peers"]}
            versions = {name: peers.get(peer_id, {}).get("version", -1) for name, peer_id in ids.items()}
            wary_health = peers.get(ids["wary"], {}).get("health", {})
            if versions["trusting"] >= 3 and versions["learner"] >= 6 and wary_health.get("paused") == "no learner":
                break  # the wary sampler is at work too: no learner it trusts is live, so it waits for one
            assert time.monotonic() < deadline, f"no progress: {versions}, wary sampler's health {wary_health}"
            time.sleep(1.0)
        assert versions["wary"] <= 0 and not wary_health.get("groups_sent"), (versions, wary_health)  # sent nothing
        assert list((tmp_path / "wary" / "weights" / "manifests").glob("*.bin")) == []
        assert list((tmp_path / "wary" / "weights" / "partial").glob("*.bin")) == []  # not even begun
        assert "fetching version" not in wary.stderr() and "rejected manifest" not in wary.stderr()
        assert list((tmp_path / "trusting" / "weights" / "manifests").glob("*.bin"))
