"""A host restarted keeps its bootstrap's address and key, so its card and invite: the samplers joined by the old
invite find the run again and train on, with no new invite; a sampler told another learner key names the live
learner it does not trust (real processes on loopback)."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

import pytest

from swarmnode.identity import Identity
from swarmnode.local.swarm import spawn_node
from swarmnode.protocol.run_card import Invite
from tests.swarm_helpers import FAST_NET, NodeProc
from tests.test_host_invite import machine_env, wait_for

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes


def _steps(steps_file: Path) -> int:
    if not steps_file.exists():
        return 0
    return sum(1 for line in steps_file.read_text().splitlines() if line.strip())


@pytest.mark.slow  # CI's long-scenario step runs it (.ci/run): 54 s at load
@pytest.mark.timeout(900)
def test_a_restarted_host_keeps_its_invite_and_its_joined_samplers_train_again(tmp_path):
    run_id = f"restart-{secrets.token_hex(3)}"
    sets = [a for s in [f"run_id={run_id}", *FAST_NET] for a in ("--set", s)]
    args = ["host", "--config", "tiny-cpu", "--owner-key", str(tmp_path / "owner.key"), *sets]
    procs: list[NodeProc] = []

    def spawn(name: str, argv: list[str], env: dict | None = None) -> NodeProc:
        p = spawn_node(tmp_path, name, argv, separate_stderr=True, env=env, threads=1)
        procs.append(NodeProc(p.name, p.popen, p.log, p.err))
        return procs[-1]

    try:
        host = spawn("host", args)
        invite = host.wait_line("invite: swarmnode join ", timeout=180)
        card = json.loads((Path(os.environ["SWARMNODE_HOME"]) / "host" / run_id / "card.json").read_text())
        (learner_key,) = card["settings"]["trust"]["learner_keys"]
        steps_file = Path(os.environ["SWARMNODE_HOME"]) / run_id / learner_key / "learner_steps.jsonl"
        samplers = [spawn(name, ["join", invite], env=machine_env(tmp_path, name)) for name in ("s1", "s2")]
        for s in samplers:
            s.ready_fields(timeout=180)
        wait_for(lambda: _steps(steps_file) >= 3, 300, "the learner's first steps", lambda: host.stdout()[-3000:])

        assert host.stop(timeout=150) == 0, host.stdout()[-3000:]  # the learner checkpoints, then the bootstrap stops
        before = _steps(steps_file)
        again = spawn("host-again", args)
        assert again.wait_line("invite: swarmnode join ", timeout=180) == invite, again.stdout()[-3000:]
        assert "card v1 " in again.stdout(), again.stdout()[-3000:]  # the same card: nothing changed
        again.wait_line("[learner] ready ", timeout=240)
        back = time.monotonic()
        wait_for(
            lambda: _steps(steps_file) > before + 2,
            240,
            "steps on the samplers' groups after the restart",
            lambda: again.stdout()[-3000:] + "\n".join(s.stdout()[-1500:] + s.stderr()[-1500:] for s in samplers),
        )
        took = time.monotonic() - back
        print(f"samplers trained on again {took:.1f} s after the restarted learner was ready")
        assert all(s.popen.poll() is None for s in samplers), "a sampler left while the host was down"

        # a sampler told another learner key: its paused line names the live learner it does not trust
        bootstrap = Invite.parse(invite).bootstraps[0]
        wrong = spawn(
            "wrong-key",
            ["join", "--config", "tiny-cpu", *sets, "--role", "sampler", "--initial-peers", bootstrap]
            + [
                "--set",
                f"trust.learner_keys=[{Identity.generate().peer_id}]",
                "--identity-path",
                str(tmp_path / "w.key"),
            ],
        )
        said = wrong.wait_line(f"sampler: learner {learner_key} is live but not in trust.learner_keys", timeout=180)
        assert "generation paused until a trusted learner joins" in said, said
    finally:
        for proc in reversed(procs):
            proc.stop(timeout=150 if proc.name.startswith("host") else 30)
