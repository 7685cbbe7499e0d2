"""Real local SAPO swarms: subprocess nodes of two tiny-model sizes, each training its own policy on its own
groups plus text groups from the others; a hostile peer that floods, forges and lies stays within its bound of
every batch and is counted. Real p2pd daemons on 127.0.0.1, real models, cleaned up by pid."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from swarm_helpers import LocalSwarm, assert_ready_after

from swarmnode.node.sapo.distrust import MIN_OUTCOMES
from swarmnode.observe.status_schema import validate

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

SMALL = ["model.tiny.hidden_size=64", "model.tiny.num_attention_heads=1", "model.tiny.intermediate_size=128"]
SAPO = [
    "mode=sapo",
    "model.tiny.warm_start_steps=20",
    "sapo.local_groups=2",
    "sapo.external_groups=4",
    "sapo.max_groups_per_peer=2",
    "sapo.external_wait=2",
    "sampler.max_groups_per_second=4",
]
WAIT_S = 300  # a deadline for failure only: each wait ends as soon as its condition holds


def _steps(root: Path, name: str) -> list[dict]:
    path = root / name / "sapo_steps.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait(condition, what: str, procs) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if condition():
            return
        for proc in procs:
            assert proc.popen.poll() is None, f"{proc.name} exited:\n{proc.stderr()[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"never happened: {what}")


def _start(swarm: LocalSwarm, root: Path, sizes: dict[str, list[str]]) -> tuple[dict, dict]:
    nodes, ids = {}, {}
    for name, size in sizes.items():
        extra = [a for s in [*SAPO, *size, f"data_dir={root / name}"] for a in ("--set", s)]
        nodes[name] = swarm.join(
            name, role="auto", work=True, wait=False, extra=[*extra, *(["--metrics-port", "0"] if name == "a" else [])]
        )
    for name, proc in nodes.items():
        ids[name] = proc.ready_fields(timeout=WAIT_S)["peer_id"]
        assert_ready_after(proc.stdout(), "sapo node ready:")  # its model loaded and its streams open
    return nodes, ids


def _trained_on_all_others(root: Path, nodes: dict, ids: dict) -> bool:
    for name in nodes:
        senders = {p for s in _steps(root, name) for p in s.get("step_external_peers", {})}
        if senders != {ids[o] for o in nodes if o != name}:
            return False
    return True


def _dial_addr(doc: dict, peer_id: str) -> str:
    """A loopback multiaddr of a peer in `status --json`, with its /p2p/ part."""
    addr = next(a for a in next(p for p in doc["peers"] if p["peer_id"] == peer_id)["addrs"] if "127.0.0.1" in a)
    return addr if "/p2p/" in addr else f"{addr}/p2p/{peer_id}"


def _health(doc: dict, peer_id: str) -> dict:
    return next(p for p in doc["peers"] if p["peer_id"] == peer_id)["health"]


@pytest.mark.slow  # CI's long-scenario step runs it (.ci/run); the suite's 10-minute budget
@pytest.mark.timeout(900)  # ~1-2 min on a quiet machine; 6 min at load average 24 on 2 cores
def test_two_sizes_train_on_each_others_text_and_a_liar_stays_bounded(tmp_path):
    """Nodes of hidden 64 and 128 train on each other's groups; a peer flooding node a with lying groups and a
    forged one gets at most `max_groups_per_peer` (2) into any of a's batches, and is counted."""
    with LocalSwarm(tmp_path, run_id="sapo-test") as swarm:
        swarm.bootstrap()
        nodes, ids = _start(swarm, tmp_path, {"a": SMALL, "b": []})
        _wait(
            lambda: _trained_on_all_others(tmp_path, nodes, ids),
            "a and b trained on each other's groups",
            nodes.values(),
        )
        _wait(lambda: ids["a"] in {p["peer_id"] for p in swarm.status()["peers"]}, "node a in status", nodes.values())
        doc = swarm.status()
        validate(doc)
        target = _dial_addr(doc, ids["a"])
        ready = tmp_path / "bad.ready"
        bad = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).with_name("sapo_bad_peer.py")),
                "--identity",
                str(tmp_path / "bad.key"),
                "--target",
                target,
                "--run",
                "sapo-test",
                "--ready",
                str(ready),
                "--count",
                "40",
            ],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
        )
        assert bad.returncode == 0, bad.stdout + bad.stderr[-3000:]
        liar = ready.read_text().strip()
        _wait(
            lambda: any(liar in s.get("step_external_peers", {}) for s in _steps(tmp_path, "a")),
            "node a trained on the liar's groups (with its own rewards)",
            nodes.values(),
        )
        for step in _steps(tmp_path, "a"):
            assert all(n <= 2 for n in step["step_external_peers"].values()), step["step_external_peers"]
            assert step["step_external_groups"] <= 4

        def counted() -> bool:
            health = _health(swarm.status(), ids["a"])
            reasons = dict(zip(health.get("rejected_reasons", []), health.get("rejected_counts", [])))
            return health.get("reward_lies", 0) >= 1 and reasons.get("invalid", 0) >= 1

        _wait(counted, "node a's health counts the liar's lies and the forged group", nodes.values())
        doc = swarm.status()
        validate(doc)
        for name in nodes:
            health = _health(doc, ids[name])
            assert health["mode"] == "sapo" and health["external_groups"] > 0 and health["step"] > 0
            assert health["tokens_per_s"] > 0  # it generates: status counts it (not "0 tokens/s")
        nodes_rate = sum(_health(doc, ids[name])["tokens_per_s"] for name in nodes)
        assert nodes_rate > 0 and doc["tokens_per_s"] >= nodes_rate - 1e-6 * nodes_rate  # summed in another order
        assert ids["b"][-12:] in _health(doc, ids["a"])["external_peers"]
        port = nodes["a"].wait_line("metrics: ").rsplit(":", 1)[1].split("/")[0]
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "swarmnode_sapo_external_groups_total" in metrics and "swarmnode_sapo_reward_lies_total" in metrics


@pytest.mark.slow  # CI's long-scenario step runs it (.ci/run)
@pytest.mark.timeout(900)
def test_three_nodes_of_two_sizes_each_train_on_both_others(tmp_path):
    with LocalSwarm(tmp_path, run_id="sapo-test") as swarm:
        swarm.bootstrap()
        # The larger model finds a share of the small ones' text implausible (10-40 % of checks, more while barely
        # warm-started) and may distrust an honest peer before it trained on one of its groups; distrust that lasts
        # 30 s instead of 300 (the test's whole wait) lets its groups be checked again meanwhile.
        brief = ["sapo.distrust_seconds=30"]
        nodes, ids = _start(swarm, tmp_path, {"a": [*SMALL, *brief], "b": brief, "c": [*SMALL, *brief]})
        _wait(
            lambda: _trained_on_all_others(tmp_path, nodes, ids),
            "every node trained on groups of both other nodes",
            nodes.values(),
        )

        def status_names_both_others_of_each() -> bool:  # status reads heartbeats: each node's, once it is there
            doc = swarm.status()
            validate(doc)
            listed = {p["peer_id"]: p for p in doc["peers"]}
            return all(
                ids[name] in listed
                and set((listed[ids[name]].get("health") or {}).get("external_peers", []))
                >= {ids[o][-12:] for o in nodes if o != name}
                for name in nodes
            )

        _wait(status_names_both_others_of_each, "status naming both other nodes as each node's senders", nodes.values())


@pytest.mark.slow  # ~1-2 min quiet: CI's long-scenario step runs it (.ci/run)
@pytest.mark.timeout(900)
def test_a_marker_attack_by_a_same_model_peer_is_refused_as_implausible(tmp_path):
    """Two warm-started nodes of one model; a third peer sends node a the marker attack (true rewards, chosen text:
    tests/sapo_marker_peer.py) at its per-peer bound. Node a's plausibility check refuses every one of its groups
    (counted per peer in its health record) and a keeps training on b's. bench/sapo-marker-attack measures what the
    attack does to the marker rate with the check off and on."""
    with LocalSwarm(tmp_path, run_id="sapo-test") as swarm:
        swarm.bootstrap()
        nodes, ids = _start(
            swarm, tmp_path, {"a": ["model.tiny.warm_start_steps=300"], "b": ["model.tiny.warm_start_steps=300"]}
        )
        _wait(
            lambda: _trained_on_all_others(tmp_path, nodes, ids),
            "a and b trained on each other's groups",
            nodes.values(),
        )
        _wait(lambda: ids["a"] in {p["peer_id"] for p in swarm.status()["peers"]}, "node a in status", nodes.values())
        attack_began = len(_steps(tmp_path, "a"))
        ready = tmp_path / "marker.ready"
        marker = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("sapo_marker_peer.py")),
                "--identity",
                str(tmp_path / "marker.key"),
                "--target",
                _dial_addr(swarm.status(), ids["a"]),
                "--run",
                "sapo-test",
                "--ready",
                str(ready),
                "--seconds",
                "10",
                "--rate",
                "4",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = marker.communicate(timeout=WAIT_S)
            assert marker.returncode == 0, out + err[-3000:]
        finally:
            if marker.poll() is None:
                marker.kill()
                marker.wait()
        attacker = ready.read_text().strip()

        def distrusted() -> bool:
            health = _health(swarm.status(), ids["a"])
            return (
                health.get("implausible_groups", 0) >= MIN_OUTCOMES
                and attacker[-12:] in health.get("implausible_peers", [])
                and attacker[-12:] in health.get("distrusted_peers", [])
            )

        _wait(
            distrusted,
            "node a's health counts the marker peer's groups as implausible and distrusts it",
            nodes.values(),
        )
        steps = _steps(tmp_path, "a")
        assert not any(attacker in s.get("step_external_peers", {}) for s in steps)
        assert steps[-1]["implausible_by_peer"][attacker] >= MIN_OUTCOMES and attacker in steps[-1]["distrusted"]
        assert any(ids["b"] in s.get("step_external_peers", {}) for s in steps[attack_began:])
        health = _health(swarm.status(), ids["a"])
        reasons = dict(zip(health.get("rejected_reasons", []), health.get("rejected_counts", [])))
        assert reasons.get("implausible", 0) >= MIN_OUTCOMES and health["plausibility_floor"] < 0


@pytest.mark.slow  # ~30-60 s quiet: CI's long-scenario step runs it (.ci/run)
@pytest.mark.timeout(600)
def test_a_sapo_node_scores_the_held_out_split_every_eval_every_versions(tmp_path):
    """A SAPO node alone (no peers: it trains on its own groups) with `learner.eval_every=2`: the held-out figures
    of the version it starts with, then of every second version, land in its steps file and its health record,
    and the plain `status` says them."""
    from swarmnode.observe.status import format_status

    evals = ["learner.eval_every=2", "learner.eval_samples=2", "task.eval_size=8", "sapo.external_wait=0.5"]
    with LocalSwarm(tmp_path, run_id="sapo-test") as swarm:
        swarm.bootstrap()
        nodes, ids = _start(swarm, tmp_path, {"a": [*SMALL, *evals]})

        def scored() -> list[dict]:
            return [s for s in _steps(tmp_path, "a") if "eval_reward" in s]

        _wait(lambda: len(scored()) >= 2, "two held-out evaluations in node a's steps file", nodes.values())
        first, second = scored()[:2]
        assert first["eval_version"] == 0 and second["eval_version"] >= 2 and second["eval_version"] % 2 == 0
        for s in (first, second):
            assert 0.0 <= s["eval_reward"] <= 1.0 and 0.0 <= s["eval_pass_at_k"] <= 1.0 and s["eval_prompts"] == 8
        assert "held-out: version 0, reward" in nodes["a"].stdout()

        def reported() -> dict | None:
            doc = swarm.status(timeout=180)  # a loaded 2-core machine starts the status client slowly
            peer = next((p for p in doc["peers"] if p["peer_id"] == ids["a"]), None)
            return doc if peer and (peer.get("health") or {}).get("eval_version", -1) >= 2 else None

        _wait(lambda: reported() is not None, "node a's health record carrying held-out figures", nodes.values())
        doc = reported()
        assert doc is not None
        validate(doc)
        health = _health(doc, ids["a"])
        assert health["mode"] == "sapo" and len(health["eval_history"]) >= 2
        assert f"held-out, learner {ids['a'][-8:]}: reward" in format_status(doc)
