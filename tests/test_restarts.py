"""Restarts never move the swarm backwards (real bootstrap, learner and sampler processes on 127.0.0.1):
a SIGKILLed learner comes back above every version it announced, trains again within a timeout, and offers
every group it had acknowledged to its buffer again (trained or dropped with a counted reason); a bootstrap
restarted with the same key and address is contacted again by the nodes that had joined through it."""

from __future__ import annotations

import re
import signal
import socket
import time

import pytest
from restart_helpers import learner_args, start_learner_and_sampler, steps, wait_rows
from swarm_helpers import LocalSwarm

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # CI's long-scenario step runs it (.ci/run); the suite's 10-minute budget
def test_a_sigkilled_learner_resumes_above_its_versions_and_replays_what_it_acknowledged(tmp_path):
    data = tmp_path / "learner"
    # the kill finds no checkpoint at all: the journal never asks for one either (its soft limit is what a restart
    # can train within half the staleness window: 8 x 1 x 1000 / 2 groups here)
    no_checkpoint = [
        "--set",
        "learner.checkpoint_every=100000",
        "--set",
        "learner.buffer_size=4096",
        "--set",
        "sync.max_staleness=1000",
    ]
    steps_file = data / "learner_steps.jsonl"
    with LocalSwarm(tmp_path) as swarm:
        first = start_learner_and_sampler(swarm, tmp_path, *no_checkpoint)
        wait_rows(steps_file, lambda rows: len(rows) >= 6, 180, "6 learner steps")
        first.stop(signal.SIGKILL)
        before = steps(steps_file)
        announced = max(r["version"] for r in before)
        acknowledged = len((data / "seen_groups").read_text().splitlines())
        assert acknowledged >= 6 * 8

        again = swarm.join("learner-again", "learner", **learner_args(tmp_path, *no_checkpoint))
        ready = again.wait_line("learner ready:", 120)
        match = re.fullmatch(r"version (\d+) \((\w+)\)", ready)
        assert match and int(match.group(1)) > announced, (ready, announced)  # never below what samplers saw
        replay = again.wait_line("acknowledged groups from before the restart:", 5)
        counts = {reason: int(n) for n, reason in re.findall(r"(\d+) (\w+)", replay)}
        # every group it acknowledged is offered to the buffer again (the journal may hold a few more: the
        # groups of one push window, journaled together before the kill, not yet remembered as seen or acked)
        window = 8  # network.push_window
        assert acknowledged <= sum(counts.values()) <= acknowledged + window, (replay, acknowledged)
        assert counts.get("ok", 0) > 0, replay
        after = wait_rows(steps_file, lambda rows: len(rows) >= len(before) + 5, 180, "5 steps after the restart")
        new = after[len(before) :]
        assert all(r["version"] > announced for r in new), new[:3]


@pytest.mark.slow  # ~25 s, and a load-sensitive wait: out of the default suite to keep it under 10 min on 2 cores
def test_a_restarted_bootstrap_is_contacted_again(tmp_path):
    port = free_port()
    with LocalSwarm(tmp_path) as swarm:
        boot_args = [
            "bootstrap",
            *swarm._set_args(),
            "--host-maddrs",
            f"/ip4/127.0.0.1/tcp/{port}",
            "--json",
            "--identity-path",
            str(tmp_path / "boot.key"),
            "--log-interval",
            "1",
        ]
        boot = swarm.spawn("bootstrap", boot_args)
        swarm.initial_peers = boot.wait_line("initial-peers:")
        boot.ready_fields()
        nodes = [swarm.join(f"node{i}", "sampler", wait=False) for i in range(2)]
        ids = {n.ready_fields()["peer_id"] for n in nodes}
        assert ids <= {p["peer_id"] for p in swarm.status()["peers"]}
        boot.stop(signal.SIGKILL)
        time.sleep(3)  # the nodes notice: their heartbeats to it fail (two missed beats expire a record)
        reborn = swarm.spawn("bootstrap-again", boot_args)
        reborn.ready_fields()
        deadline = time.monotonic() + 60
        seen: set[str] = set()
        while time.monotonic() < deadline:
            seen = {p["peer_id"] for p in swarm.status()["peers"]}
            if ids <= seen:
                break
            time.sleep(1)
        assert ids <= seen, f"the restarted bootstrap sees {len(seen & ids)} of the 2 nodes"


@pytest.mark.slow  # a bootstrap, a sampler and three learner lives: ~3 min on 2 cores
@pytest.mark.timeout(900)
def test_a_killed_learner_trains_what_it_acknowledged_and_a_second_kill_keeps_those_steps(tmp_path):
    data = tmp_path / "learner"
    # no periodic checkpoint: only the journal's soft limit (what a restart can train again) makes them
    no_checkpoint = ["--set", "learner.checkpoint_every=100000"]
    steps_file = data / "learner_steps.jsonl"
    with LocalSwarm(tmp_path) as swarm:
        first = start_learner_and_sampler(swarm, tmp_path, *no_checkpoint)
        # more versions than sync.max_staleness (16): by their numbers, the first groups are stale at the restart
        wait_rows(steps_file, lambda rows: len(rows) >= 30, 240, "30 learner steps")
        journal = data / "group_journal"  # compacted at each checkpoint: kill it while it holds work at risk
        deadline = time.monotonic() + 120
        while journal.stat().st_size < (16 << 10) and time.monotonic() < deadline:
            time.sleep(0.05)
        first.stop(signal.SIGKILL)
        acknowledged = len((data / "seen_groups").read_text().splitlines())

        again = swarm.join("learner-again", "learner", **learner_args(tmp_path, *no_checkpoint))
        replay = again.wait_line("acknowledged groups from before the restart:", 120)
        at_risk = sum(int(n) for n, _ in re.findall(r"(\d+) (\w+)", replay))  # acknowledged after the checkpoint
        assert 0 < at_risk <= acknowledged, (replay, acknowledged)
        done = again.wait_line("groups replayed after the restart:", 300)
        match = re.fullmatch(r"(\d+) trained, (\d+) dropped; checkpoint at step (\d+)", done)
        assert match, done
        trained, checkpoint_step = int(match.group(1)), int(match.group(3))
        print(f"acknowledged after the checkpoint: {replay}; replayed: {done}")
        assert trained >= 0.95 * at_risk, (replay, done, again.stdout()[-2000:])

        seen = len(steps(steps_file))
        wait_rows(steps_file, lambda rows: len(rows) >= seen + 3, 120, "3 steps after the replay")
        again.stop(signal.SIGKILL)  # a second kill before the next periodic checkpoint
        seen = len(steps(steps_file))
        third = swarm.join("learner-third", "learner", **learner_args(tmp_path, *no_checkpoint))
        third.wait_line("learner ready:", 120)
        after = wait_rows(steps_file, lambda rows: len(rows) >= seen + 1, 180, "a step after the second restart")
        # it resumes at the checkpoint taken once the replayed groups were trained, or a later one: not back at 0
        assert after[seen]["step"] > checkpoint_step, (after[seen], checkpoint_step)
