"""Nodes with nobody to work with, as real processes (bootstrap, learner, sampler) on 127.0.0.1: a sampler with no
learner holds generation (health `paused: no learner`) and starts when one joins; a learner's `idle_seconds`
counts its time waiting for groups, not its time training, and keeps growing in its health record (what
`swarmnode status --json` shows) while no sampler feeds it."""

from __future__ import annotations

import signal
import time

import pytest
from restart_helpers import WORK, wait_for
from swarm_helpers import LocalSwarm

from swarmnode.identity import Identity
from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.local.demo import read_steps
from swarmnode.node.roles.sampler_role import NO_LEARNER

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

CLOCKS = 0.02  # the step records mix wall-clock stamps and monotonic durations, each rounded to 1 ms


def health_of(swarm: LocalSwarm, peer_id: str) -> dict | None:
    peer = next((p for p in swarm.status()["peers"] if p["peer_id"] == peer_id), None)
    return None if peer is None else peer.get("health", {})


@pytest.mark.slow  # three working nodes one after another: about a minute on 2 shared cores
@pytest.mark.timeout(300)
def test_sampler_waits_for_a_learner_and_learner_idle_time_counts_only_waiting(tmp_path):
    learner_key, sampler_key = tmp_path / "learner.key", tmp_path / "sampler.key"
    learner_id = Identity.load_or_create(learner_key).peer_id
    sampler_id = Identity.load_or_create(sampler_key).peer_id
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        sampler = swarm.join(
            "sampler",
            "sampler",
            work=True,
            identity=sampler_key,
            extra=[*WORK, "--set", f"data_dir={tmp_path / 's'}", "--set", f"trust.learner_keys=[{learner_id}]"],
        )
        # alone, the sampler holds generation instead of making groups nobody receives
        held = wait_for(
            lambda: (h := health_of(swarm, sampler_id)) and h.get("paused") == NO_LEARNER and h,
            60,
            "the sampler to report it waits for a learner",
            sampler.stderr,
        )
        time.sleep(3.0)
        later = health_of(swarm, sampler_id)
        assert later["paused"] == NO_LEARNER and later.get("groups_sent", 0) == held.get("groups_sent", 0) == 0
        assert "generation paused until one joins" in sampler.stdout()

        # a learner joins: the sampler starts and the learner trains on its groups
        learner_dir = tmp_path / "learner"
        learner = swarm.join(
            "learner", "learner", work=True, identity=learner_key, extra=[*WORK, "--set", f"data_dir={learner_dir}"]
        )
        rows = wait_for(
            lambda: len(r := read_steps(learner_dir / STEPS_FILE)) >= 6 and r,
            180,
            "6 learner steps",
            lambda: learner.stderr()[-2000:] + sampler.stderr()[-2000:],
        )
        working = wait_for(
            lambda: (h := health_of(swarm, sampler_id)) and h.get("groups_acked", 0) > 0 and h,
            60,
            "the sampler's groups acknowledged",
        )
        assert working["paused"] == "" and working.get("groups_dropped", 0) == 0
        # it waited for the learner's inbox and weights: no group of its was refused (made with weights of no
        # learner's line, or pushed while the learner was loading)
        assert [r["groups_rejected"] for r in rows] == [0] * len(rows)
        # idle time is the waiting between steps: a step's own time is never in it
        for before, after in zip(rows, rows[1:]):
            idle = after["idle_seconds"] - before["idle_seconds"]
            assert idle >= 0 and idle + after["step_time"] <= after["time"] - before["time"] + CLOCKS, (before, after)
        assert rows[-1]["idle_seconds"] > 0  # it waited for the sampler's first groups

        # the sampler leaves: no groups come, the learner's idle time grows in its health record
        sampler.stop(signal.SIGTERM)
        time.sleep(3.0)
        began = time.monotonic()
        first = health_of(swarm, learner_id)
        time.sleep(5.0)
        second = health_of(swarm, learner_id)
        elapsed = time.monotonic() - began  # each record may trail its read by a heartbeat (1 s)
        assert second["step"] == first["step"], "no sampler: no step"
        grown = second["idle_seconds"] - first["idle_seconds"]
        assert 2.0 <= grown <= elapsed + 2.0, (first["idle_seconds"], second["idle_seconds"], elapsed)
        assert second["idle_seconds"] <= second["uptime"]
