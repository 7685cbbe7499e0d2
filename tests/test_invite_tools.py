"""What a volunteer runs with nothing but the invite, against a real `swarmnode host --bootstrap-only` on loopback
(no model loads: seconds): `hardware <invite>` sizes the run's model, `join <invite>` with other task data is
refused before `ready` in one line, `status <invite>` and `dashboard <invite> --once` show the card and flag a node
that runs an older card version after `host --update`."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from swarm_helpers import FAST_NET, NodeProc
from test_host_invite import machine_env, swarmnode
from test_run_card_sources import problems

from swarmnode.config import load_config
from swarmnode.errors import ExitCode
from swarmnode.identity import Identity
from swarmnode.local.swarm import spawn_node
from swarmnode.node.hardware import estimate_memory

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

RUN_SETS = ["task.name=math", "model.tiny.warm_start_steps=0", "model.tiny.num_hidden_layers=3"]


@dataclass
class Hosted:
    root: Path
    run_id: str
    invite: str
    owner_key: Path
    learner: str
    procs: list[NodeProc]

    def spawn(self, name: str, args: list[str], env: dict | None = None) -> NodeProc:
        p = spawn_node(self.root, name, args, separate_stderr=True, env=env, threads=1)
        proc = NodeProc(p.name, p.popen, p.log, p.err)
        self.procs.append(proc)
        return proc


@pytest.fixture(scope="module")
def hosted(tmp_path_factory) -> Hosted:
    root = tmp_path_factory.mktemp("hosted")
    run_id = f"tools-{secrets.token_hex(3)}"
    learner = Identity.load_or_create(root / "learner.key").peer_id
    sets = [
        f"run_id={run_id}",
        *FAST_NET,
        *RUN_SETS,
        f"task.path={problems(root / 'ours.jsonl', [1, 2, 3])}",
        f"trust.learner_keys=[{learner}]",
    ]
    run = Hosted(root, run_id, "", root / "owner.key", learner, [])
    host = run.spawn(
        "host",
        [
            "host",
            "--bootstrap-only",
            "--config",
            "tiny-cpu",
            "--owner-key",
            str(run.owner_key),
            "--host-maddrs",
            "/ip4/127.0.0.1/tcp/0",
            *[a for s in sets for a in ("--set", s)],
        ],
    )
    try:
        run.invite = host.wait_line("invite: swarmnode join ", timeout=180)
        yield run
    finally:
        for proc in reversed(run.procs):
            proc.stop(timeout=30)


def test_hardware_of_an_invite_sizes_the_runs_model(hosted):
    done = swarmnode("hardware", hosted.invite, "--json", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    params = json.loads(done.stdout)["estimate"]["parameters"]
    run, plain = (estimate_memory(load_config("tiny-cpu", sets)).parameters for sets in (RUN_SETS[-1:], []))
    assert params == run != plain, (params, run, plain)  # the card's model, not the preset's


def test_a_joiner_whose_task_file_differs_is_refused_before_ready_naming_it(hosted):
    theirs = problems(hosted.root / "theirs.jsonl", [1, 2, 4])
    done = swarmnode(
        "join", hosted.invite, "--set", f"task.path={theirs}", env=machine_env(hosted.root, "other"), timeout=120
    )
    assert done.returncode == ExitCode.USAGE and "ready" not in done.stdout, done.stdout[-2000:] + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "task data sha256" in lines[0] and str(theirs) in lines[0], lines
    unnamed = swarmnode("join", hosted.invite, env=machine_env(hosted.root, "other"), timeout=120)
    assert unnamed.returncode == ExitCode.USAGE and "ready" not in unnamed.stdout, unnamed.stderr
    assert unnamed.stderr.count("\n") == 1 and "add --set task.path=FILE" in unnamed.stderr, unnamed.stderr


def _status(invite: str) -> dict:
    done = swarmnode("status", invite, "--json", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_status_and_dashboard_of_an_invite_show_the_card_and_flag_a_node_on_an_older_version(hosted):
    idle = hosted.spawn(
        "idle", ["join", hosted.invite, "--idle", "--role", "sampler"], env=machine_env(hosted.root, "idle")
    )
    idle_id = idle.ready_fields()["peer_id"]
    update = swarmnode(
        "host",
        "--update",
        "--config",
        "tiny-cpu",
        "--set",
        f"run_id={hosted.run_id}",
        "--owner-key",
        str(hosted.owner_key),
        "--set",
        "sync.max_staleness=4",
    )
    assert update.returncode == 0 and "run card v2: sync.max_staleness 16 -> 4" in update.stdout, update.stderr
    deadline = time.monotonic() + 90  # the bootstrap stores it within a heartbeat (1 s here)
    while (doc := _status(hosted.invite))["card"]["version"] < 2 and time.monotonic() < deadline:
        time.sleep(1)
    card = doc["card"]
    assert (card["run_id"], card["version"], card["model"], card["task"], card["learners"]) == (
        hosted.run_id,
        2,
        "builtin:tiny",
        "math",
        [hosted.learner],
    ), card
    assert card["owner"] == Identity.load(hosted.owner_key).peer_id and card["bootstraps"], card
    old = [a for a in doc["alerts"] if a["kind"] == "old_card"]  # the idle node joined at v1 and does not follow
    assert [a["peer_id"] for a in old] == [idle_id] and "runs card v1, the run's is v2" in old[0]["message"], old

    text = swarmnode("status", hosted.invite, timeout=120)
    assert text.stdout.startswith(f"card v2 of run {hosted.run_id}") and "model builtin:tiny, task math" in text.stdout
    view = swarmnode("dashboard", hosted.invite, "--once", timeout=120)
    assert view.returncode == 0, view.stderr[-2000:]
    assert "run card v2" in view.stdout and "1 node(s) run an older card version" in view.stdout, view.stdout
    assert f"card v2 of run {hosted.run_id}" in view.stdout and hosted.learner in view.stdout, view.stdout
