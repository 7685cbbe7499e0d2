"""`swarmnode status --self`: the local node's one-line answer (contributing / idle and why / failing and why /
unknown), its exit code, `--json`, and `--on-alert` run on each change of state; the records are written by the
node's own writer (`SelfRecord`), and the end-to-end case by a real sampler of a real local swarm."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from restart_helpers import WORK, learner_args
from swarm_helpers import LocalSwarm

from swarmnode.observe.self_record import FILE_NAME, HISTORY_EVERY_S, SelfRecord, read_self_record
from swarmnode.observe.self_status import EXIT, RECENT_S, STARTING_S, line, verdict

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def record(
    tmp_path: Path,
    role: str = "sampler",
    *,
    minutes: float = 10,
    sent_per_point: float = 3,
    acked_per_point: float = 3,
    health: dict | None = None,
    pid: int | None = None,
    extra: dict | None = None,
    written_ago: float = 0.0,
) -> tuple[dict, float]:
    """A node record as the node writes it: `minutes` of counter points, then the file read back; (doc, now)."""
    clock = Clock()
    tmp_path.mkdir(parents=True, exist_ok=True)
    writer = SelfRecord(tmp_path, peer_id="12D3KooWtest", role=role, run_id="r", heartbeat=2.0, clock=clock)
    if pid is not None:
        writer.head["pid"] = pid
    writer.extra.update(extra or {})
    sent = work = 0.0
    for _ in range(int(minutes * 60 / HISTORY_EVERY_S) + 1):
        writer.update({"version": 12, "lag": 1, **(health or {})}, sent=sent, work=work, force=True)
        clock.now += HISTORY_EVERY_S
        sent, work = sent + sent_per_point, work + acked_per_point
    clock.now -= HISTORY_EVERY_S
    return read_self_record(tmp_path), clock.now + written_ago


def state(doc_now: tuple[dict, float]) -> dict:
    doc, now = doc_now
    return verdict(doc, now)


def test_a_sampler_whose_groups_are_acknowledged_is_contributing(tmp_path):
    answer = state(record(tmp_path))
    assert answer["state"] == "contributing" and answer["exit_code"] == 0
    assert answer["work_last_hour"] == 60 and "60 groups acknowledged in the last hour, version 12, 1 behind" in line(
        answer
    ), line(answer)


def test_a_learner_that_trains_is_contributing_and_one_without_samplers_is_idle(tmp_path):
    assert state(record(tmp_path / "a", "learner"))["state"] == "contributing"
    idle = state(record(tmp_path / "b", "learner", sent_per_point=0, acked_per_point=0))
    assert (idle["state"], idle["exit_code"]) == ("idle", 1) and idle["why"].startswith("no samplers"), idle


@pytest.mark.parametrize(
    "health,extra,why",
    [
        ({"paused": "no learner"}, {}, "paused: no learner"),
        ({"paused": "too stale"}, {}, "paused: too stale"),
        ({}, {"waiting_for": "credit"}, "waiting for credit"),
    ],
)
def test_an_idle_sampler_says_why(tmp_path, health, extra, why):
    answer = state(record(tmp_path, sent_per_point=0, acked_per_point=0, health=health, extra=extra))
    assert answer["state"] == "idle" and answer["why"].startswith(why), answer


def test_a_young_node_without_work_is_starting(tmp_path):
    answer = state(record(tmp_path, minutes=STARTING_S / 120, sent_per_point=0, acked_per_point=0))
    assert answer["state"] == "idle" and answer["why"].startswith("starting"), answer


@pytest.mark.usefixtures("starts_processes")
def test_failing_a_dead_node_a_stuck_one_a_full_disk_and_groups_nobody_acknowledges(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cases = {
        "not running": record(tmp_path / "dead", pid=dead.pid),
        "has not changed": record(tmp_path / "stuck", written_ago=600),
        "disk full: /data": record(
            tmp_path / "disk",
            health={"disk_full": "disk full: /data has 0.1 MB free, version 9 needs 2.0 MB; keeping what it has"},
        ),
        "none acknowledged": record(tmp_path / "refused", minutes=RECENT_S / 60 + 1, acked_per_point=0),
    }
    for why, doc_now in cases.items():
        answer = state(doc_now)
        assert (answer["state"], answer["exit_code"]) == ("failing", 2) and why in answer["why"], (why, answer)


def test_no_record_is_unknown(tmp_path):
    answer = verdict(None, where=tmp_path)
    assert (answer["state"], answer["exit_code"]) == ("unknown", EXIT["unknown"]) and str(tmp_path) in answer["why"]


def status_self(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-m", "swarmnode", "status", "--self", "--set", f"data_dir={data_dir}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )


def rewrite(tmp_path: Path, **kw) -> None:
    """Write the node record again, as of now (the command compares it with the wall clock)."""
    doc, now = record(tmp_path, **kw)
    shift = time.time() - now
    doc["written_at"] += shift
    doc["started_at"] += shift
    doc["history"] = [[t + shift, s, w] for t, s, w in doc["history"]]
    doc["pid"] = os.getpid()
    (tmp_path / FILE_NAME).write_text(json.dumps(doc))


@pytest.mark.usefixtures("starts_processes")
def test_the_command_answers_in_one_line_with_the_exit_code_and_json(tmp_path):
    rewrite(tmp_path)
    done = status_self(tmp_path)
    assert done.returncode == 0 and done.stdout.count("\n") == 1, (done.stdout, done.stderr)
    assert done.stdout.startswith("sampler contributing: "), done.stdout
    rewrite(tmp_path, sent_per_point=0, acked_per_point=0, health={"paused": "no learner"})
    done = status_self(tmp_path, "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and doc["state"] == "idle" and doc["why"] == "paused: no learner", done.stdout
    assert status_self(tmp_path / "nothing").returncode == 3


@pytest.mark.usefixtures("starts_processes")
def test_on_alert_runs_the_command_once_per_change_with_the_alert_in_its_environment(tmp_path):
    log = tmp_path / "alerts.log"
    hook = f'echo "$SWARMNODE_ALERT_PREVIOUS>$SWARMNODE_ALERT_STATE|$SWARMNODE_ALERT_MESSAGE" >> {log}'
    node = tmp_path / "node"
    node.mkdir()
    rewrite(node)
    assert status_self(node, "--on-alert", hook).returncode == 0
    assert not log.exists()  # contributing from the start: nothing to say
    rewrite(node, health={"disk_full": "disk full: /d has 0.0 MB free, version 3 needs 2.0 MB"})
    assert status_self(node, "--on-alert", hook).returncode == 2
    assert status_self(node, "--on-alert", hook).returncode == 2  # no change: no second alert
    rewrite(node)
    assert status_self(node, "--on-alert", hook).returncode == 0
    lines = log.read_text().splitlines()
    assert lines == [
        "contributing>failing|sampler failing: disk full: /d has 0.0 MB free, version 3 needs 2.0 MB",
        "failing>contributing|sampler contributing: 60 groups acknowledged in the last hour, version 12, 1 behind",
    ], lines


@pytest.mark.slow  # a bootstrap, a learner and a sampler: ~1 min quiet, several at a load of 30
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("starts_processes")
def test_a_real_sampler_is_contributing_then_failing_once_killed(tmp_path):
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        swarm.join("learner", "learner", wait=False, **learner_args(tmp_path)).ready_fields(300)
        sampler = swarm.join(
            "sampler", "sampler", work=True, wait=False, extra=[*WORK, "--set", f"data_dir={tmp_path / 'sampler'}"]
        )
        sampler.ready_fields(300)
        deadline = time.monotonic() + 300
        done = None
        while time.monotonic() < deadline:
            done = status_self(tmp_path / "sampler")
            if done.returncode == 0:
                break
            time.sleep(3)
        assert done is not None and done.returncode == 0, (done.stdout, done.stderr)
        assert done.stdout.startswith("sampler contributing: ") and "groups acknowledged" in done.stdout
        learner_answer = status_self(tmp_path / "learner")
        assert learner_answer.returncode == 0 and "steps trained" in learner_answer.stdout, learner_answer.stdout
        sampler.stop(9)
        gone = status_self(tmp_path / "sampler")
        assert gone.returncode == 2 and "is not running" in gone.stdout, gone.stdout
