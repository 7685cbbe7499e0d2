"""A sampler that cannot deliver stops generating and says why, as real processes on 127.0.0.1: it cannot load
any version of the run's learner (here its model is not the learner's, so every manifest is refused; behind a
NAT, a relay that cuts weight transfers does the same), generates with its own weights, and the learner refuses
every group as not of its line: issue 48's sampler made 11,388 such groups in 5 minutes. After a bounded number
of groups the sampler prints the reason and what to change, in either pacing mode, makes no more groups, and its
health (`status --json`) shows it: `paused`, the `groups_wasted` counter and the run's `sampler_undelivered`
alert."""

from __future__ import annotations

import time

import pytest
from restart_helpers import WORK, wait_for
from swarm_helpers import LocalSwarm

from swarmnode.identity import Identity
from swarmnode.sampler.undelivered import UNDELIVERED_MIN

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes


@pytest.mark.slow  # three working nodes, a 10 s startup timeout and 128 refused groups: about a minute each
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("pacing", ["credits", "outbox"])
def test_a_sampler_that_cannot_deliver_stops_generating_and_says_why(tmp_path, pacing):
    learner_key, sampler_key = tmp_path / "learner.key", tmp_path / "sampler.key"
    learner_id = Identity.load_or_create(learner_key).peer_id
    sampler_id = Identity.load_or_create(sampler_key).peer_id
    fast = [*WORK, "--set", "network.startup_timeout=10", "--set", f"sync.pacing={pacing}"]
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        learner = swarm.join(
            "learner",
            "learner",
            work=True,
            identity=learner_key,
            wait=False,
            extra=[*fast, "--set", f"data_dir={tmp_path / 'learner'}"],
        )
        learner.ready_fields(timeout=180)
        sampler = swarm.join(
            "sampler",
            "sampler",
            work=True,
            identity=sampler_key,
            extra=[
                *fast,
                "--set",
                f"data_dir={tmp_path / 'sampler'}",
                "--set",
                f"trust.learner_keys=[{learner_id}]",
                "--set",
                "model.tiny.intermediate_size=192",
            ],
            wait=False,
        )  # not the learner's model
        sampler.ready_fields(timeout=180)

        def stopped():
            doc = swarm.status()
            peer = next((p for p in doc["peers"] if p["peer_id"] == sampler_id), None)
            health = (peer or {}).get("health", {})
            return (doc, health) if str(health.get("paused", "")).startswith("undelivered") else None

        wait_for(
            lambda: "sampler: stopped generating:" in sampler.stdout(),
            300,
            "the sampler to stop generating",
            sampler.stderr,
        )
        doc, health = wait_for(stopped, 400, "the sampler's health to show the stop", sampler.stderr)
        out = sampler.stdout()
        assert "sampler: stopped generating:" in out and "none acknowledged" in out, out[-3000:]
        line = next(row for row in out.splitlines() if row.startswith("sampler: stopped generating:"))
        assert "refused them (lineage" in line and "no version of the learner is loaded here" in line, line
        assert "fetching version 0 failed" in line, line
        assert "next try in" in line, line
        assert any(a["kind"] == "sampler_undelivered" and a["peer_id"] == sampler_id for a in doc["alerts"])
        made = health.get("groups_sent", 0)
        assert UNDELIVERED_MIN <= made <= 2 * UNDELIVERED_MIN, health  # bounded: it stopped near the limit
        assert health.get("groups_acked", 0) == 0 and health.get("groups_wasted", 0) > 0, health
        time.sleep(5.0)
        later = next(p for p in swarm.status()["peers"] if p["peer_id"] == sampler_id)["health"]
        # stopped: at most one probe batch (4 prompts in tiny-cpu) since, 30 s after the stop
        assert made <= later.get("groups_sent", 0) <= made + 4 and later["paused"].startswith("undelivered"), later
