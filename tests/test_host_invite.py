"""`swarmnode host` and `swarmnode join <invite>` as real processes on loopback: samplers started with nothing but
the invite learn; a conflicting shared setting and a card signed by another key are refused before `ready`; card
updates reach running samplers; the old way of joining (every key by hand) still works; an invite whose
bootstraps are all down answers at once with one line."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmnode.errors import ExitCode
from swarmnode.identity import Identity
from swarmnode.local.demo import reward_trend
from swarmnode.local.swarm import spawn_node
from swarmnode.protocol.run_card import Invite
from tests.swarm_helpers import FAST_NET, NodeProc

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

REPO = Path(__file__).resolve().parent.parent


def swarmnode(*args: str, env: dict | None = None, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-m", "swarmnode", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_invite_whose_bootstraps_are_all_down_answers_at_once_with_one_line():
    peer = Identity.generate().peer_id
    invite = Invite(
        "some-run",
        Identity.generate().peer_id,
        (f"/ip4/127.0.0.1/tcp/{free_port()}/p2p/{peer}", f"/ip4/127.0.0.1/tcp/{free_port()}/p2p/{peer}"),
    )
    started = time.monotonic()
    done = swarmnode("join", invite.encode(), timeout=90)
    took = time.monotonic() - started
    assert done.returncode == ExitCode.NETWORK, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: run some-run: no bootstrap of the invite answered"), lines
    assert "ready" not in done.stdout
    print(f"answered in {took:.1f} s")


def test_a_damaged_invite_is_one_line_before_anything_starts():
    done = swarmnode("join", "swarmnode1:eyJydW4iOiJ0aW55", timeout=60)
    assert done.returncode == ExitCode.USAGE and done.stderr.count("\n") == 1 and "damaged" in done.stderr


def machine_env(root: Path, name: str) -> dict[str, str]:
    """A sampler's own "machine": its own SWARMNODE_HOME (its default identity), the test home's model cache."""
    home = root / name
    home.mkdir(parents=True, exist_ok=True)
    shared = Path(os.environ["SWARMNODE_HOME"]) / "models"
    shared.mkdir(parents=True, exist_ok=True)
    if not (home / "models").exists():
        (home / "models").symlink_to(shared)
    return {"SWARMNODE_HOME": str(home)}


def wait_for(predicate, timeout: float, what: str, diagnose=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}\n{diagnose()}")


def learner_rewards(steps_file: Path) -> list[float]:
    if not steps_file.exists():
        return []
    return [float(json.loads(line)["reward_mean"]) for line in steps_file.read_text().splitlines() if line.strip()]


STEPS = 150  # learner steps before the reward's trend is judged (as the demo's test: gain > CLIMB, t > TREND_T)
CLIMB, TREND_T = 0.015, 2.0


@pytest.mark.slow  # CI's long-scenario step runs it (.ci/run)
@pytest.mark.timeout(1800)
def test_host_and_two_samplers_joined_by_invite_learn_and_follow_card_updates(tmp_path):
    run_id = f"inv-{secrets.token_hex(3)}"
    sets = [f"run_id={run_id}", *FAST_NET]
    set_args = [a for s in sets for a in ("--set", s)]
    owner_key = tmp_path / "owner.key"
    procs: list[NodeProc] = []

    def spawn(name: str, args: list[str], env: dict | None = None) -> NodeProc:
        p = spawn_node(tmp_path, name, args, separate_stderr=True, env=env, threads=1)
        proc = NodeProc(p.name, p.popen, p.log, p.err)
        procs.append(proc)
        return proc

    try:
        host = spawn("host", ["host", "--config", "tiny-cpu", *set_args, "--owner-key", str(owner_key)])
        invite = host.wait_line("invite: swarmnode join ", timeout=180)
        card = json.loads((Path(os.environ["SWARMNODE_HOME"]) / "host" / run_id / "card.json").read_text())
        (learner_key,) = card["settings"]["trust"]["learner_keys"]
        assert card["owner"] == Identity.load(owner_key).peer_id and card["version"] == 1

        samplers = [spawn(name, ["join", invite], env=machine_env(tmp_path, name)) for name in ("s1", "s2")]
        for s in samplers:
            assert s.ready_fields(timeout=180)["run"] == run_id

        # a shared setting of its own: refused before `ready`, naming the key and both values
        clash = swarmnode("join", invite, "--set", "sampler.temperature=0.7", env=machine_env(tmp_path, "s3"))
        assert clash.returncode == ExitCode.USAGE and "ready" not in clash.stdout
        assert clash.stderr.count("\n") == 1 and "sampler.temperature 0.7, run 1.0" in clash.stderr, clash.stderr

        # the same run and bootstraps, another owner: the card there is not signed by it
        forged = Invite.parse(invite)
        forged = Invite(forged.run_id, Identity.generate().peer_id, forged.bootstraps).encode()
        other = swarmnode("join", forged, env=machine_env(tmp_path, "s4"))
        assert other.returncode == ExitCode.NETWORK and "ready" not in other.stdout
        assert other.stderr.count("\n") == 1 and "no run card signed by the invite's owner" in other.stderr
        assert "only cards signed by other keys" in other.stderr, other.stderr

        # the old way: every key by hand
        old = spawn(
            "old",
            [
                "join",
                "--config",
                "tiny-cpu",
                *set_args,
                "--role",
                "sampler",
                "--initial-peers",
                Invite.parse(invite).bootstraps[0],
                "--set",
                f"trust.learner_keys=[{learner_key}]",
                "--identity-path",
                str(tmp_path / "old.key"),
            ],
        )
        old.wait_line("sampler ready", timeout=240)
        old.stop()

        # card updates reach the running samplers: a second learner key, then a new staleness bound
        second = Identity.load_or_create(tmp_path / "learner2.key").peer_id
        update = [
            "host",
            "--update",
            "--config",
            "tiny-cpu",
            "--set",
            f"run_id={run_id}",
            "--owner-key",
            str(owner_key),
        ]
        done = swarmnode(*update, "--set", f"trust.learner_keys=[{learner_key},{second}]")
        assert done.returncode == 0 and "run card v2: trust.learner_keys" in done.stdout, done.stderr
        for s in samplers:
            s.wait_line("run card v1 -> v2: trust.learner_keys", timeout=60)
        done = swarmnode(*update, "--set", "sync.max_staleness=4")
        assert done.returncode == 0 and "run card v3: sync.max_staleness 16 -> 4" in done.stdout, done.stderr
        for s in samplers:
            s.wait_line("run card v2 -> v3: sync.max_staleness 16 -> 4", timeout=60)
        assert all(s.popen.poll() is None for s in samplers), "a sampler left on a followable update"
        status = swarmnode("status", invite, "--json")
        doc = json.loads(status.stdout)
        assert doc["card"]["version"] == 3 and doc["card"]["learners"] == [learner_key, second], doc["card"]
        assert not [a for a in doc["alerts"] if a["kind"] == "old_card"], doc["alerts"]  # all on v3
        shown = swarmnode("status", invite)
        assert shown.stdout.startswith(f"card v3 of run {run_id}") and "model builtin:tiny" in shown.stdout
        for s in samplers:  # start-up noise is gone; nothing but the invite made them samplers
            output = s.stdout() + s.stderr()
            assert "Loading weights" not in output and "stale p2pd sockets" not in output, output[-2000:]
            assert "role=sampler" in s.stdout(), s.stdout()[-2000:]

        steps_file = Path(os.environ["SWARMNODE_HOME"]) / run_id / learner_key / "learner_steps.jsonl"
        wait_for(
            lambda: len(learner_rewards(steps_file)) >= STEPS,
            600,
            f"{STEPS} learner steps",
            lambda: host.stdout()[-3000:] + host.stderr()[-2000:],
        )
        trend = reward_trend(learner_rewards(steps_file)[:STEPS])
        assert trend["reward_gain"] > CLIMB and trend["reward_trend_t"] > TREND_T, trend
    finally:
        for proc in reversed(procs):
            proc.stop(timeout=30)
