"""Two learners of one run train one policy through hivemind's averaging, with two samplers: real bootstrap,
learner and sampler processes on 127.0.0.1 (tiny model, averaging every 4 steps)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from restart_helpers import WORK, wait_for
from swarm_helpers import LocalSwarm

from swarmnode.identity import Identity
from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.local.demo import read_steps
from swarmnode.protocol.manifest import WeightManifest

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

# peer records that outlive a few late heartbeats: on a loaded machine a learner whose record flickers out would
# count as alone (and publish on its own) although its peer lives
PATIENT_NET = ["network.heartbeat_interval=2", "network.missed_beats_to_expire=5"]
AVERAGING = [
    "learner.max_learners=2",
    "learner.average_every=4",
    "learner.averaging_timeout=10",
    "learner.keep_versions=1000",
]


def rows(data_dir: Path) -> list[dict]:
    return read_steps(data_dir / STEPS_FILE)


def chunks(data_dir: Path, version: int) -> list[str] | None:
    """The chunk hashes of `version` as this learner published it (None if it holds no such version)."""
    path = data_dir / "weights" / "manifests" / f"{version}.bin"
    return [c.sha256 for c in WeightManifest.decode(path.read_bytes()).chunks] if path.exists() else None


def shared_versions(dirs: list[Path], above: int = -1) -> list[int]:
    """Versions above `above` that every learner in `dirs` published."""
    held = [{int(p.stem) for p in (d / "weights" / "manifests").glob("*.bin")} for d in dirs]
    return sorted(v for v in set.intersection(*held) if v > above)


@pytest.mark.slow
def test_two_learners_average_publish_one_version_survive_a_kill_and_rejoin(tmp_path):
    keys = {name: tmp_path / f"{name}.key" for name in ("la", "lb")}
    ids = [Identity.load_or_create(key).peer_id for key in keys.values()]
    dirs = {name: tmp_path / name for name in keys}
    sets = [a for s in [*AVERAGING, f"trust.learner_keys=[{','.join(ids)}]"] for a in ("--set", s)]

    def learner(name: str, swarm: LocalSwarm, proc_name: str | None = None):
        return swarm.join(
            proc_name or name,
            "learner",
            work=True,
            identity=keys[name],
            extra=[*WORK, *sets, "--set", f"data_dir={dirs[name]}"],
        )

    with LocalSwarm(tmp_path, extra_sets=PATIENT_NET) as swarm:
        swarm.bootstrap()
        procs = {name: learner(name, swarm) for name in keys}
        samplers = [
            swarm.join(f"s{i}", "sampler", work=True, extra=[*WORK, "--set", f"data_dir={tmp_path / f's{i}'}"])
            for i in (1, 2)
        ]

        def logs() -> str:
            return "\n".join(
                f"--- {p.name}\n{p.stdout()[-1500:]}\n{p.stderr()[-1500:]}" for p in [*procs.values(), *samplers]
            )

        # both learners step, average, and publish the same versions with the same chunks
        both = [dirs["la"], dirs["lb"]]
        common = wait_for(lambda: len(shared_versions(both, 0)) >= 2, 240, "two versions both learners published", logs)
        assert all(rows(d) for d in both), "a learner took no step"
        for version in shared_versions(both, 0):
            assert chunks(dirs["la"], version) == chunks(dirs["lb"], version), f"version {version} differs"

        # samplers fetch from either learner: both learners served chunks, both samplers hold a trained version
        def fetched_from_both(doc: dict) -> bool:
            peers = [p for p in doc["peers"] if p["role"] in ("learner", "sampler")]
            return (
                sum(p["role"] == "sampler" and p["version"] > 0 for p in peers) == 2
                and sum(p["role"] == "learner" and (p["health"].get("served_mb") or 0) > 0 for p in peers) == 2
            )

        doc = wait_for(
            lambda: (d := swarm.status()) and fetched_from_both(d) and d,
            180,
            "both samplers on a trained version, both learners serving chunks",
            logs,
        )
        rounds = {p["peer_id"]: p["health"].get("averaging_rounds") for p in doc["peers"] if p["role"] == "learner"}
        assert all(n and n >= 1 for n in rounds.values()), rounds

        # SIGKILL one learner: the other trains on and publishes new versions on its own
        procs["lb"].stop(signal.SIGKILL)
        killed_at = max(r["version"] for r in rows(dirs["la"]))
        wait_for(
            lambda: max(r["version"] for r in rows(dirs["la"])) >= killed_at + 3,
            240,
            "the surviving learner publishing 3 more versions",
            logs,
        )

        # restarted (same identity and data), it loads the current state and rejoins the rounds
        procs["lb"] = learner("lb", swarm, "lb-again")
        procs["lb"].wait_line("averaging: loaded version", 120)
        restarted_at = max(r["version"] for r in rows(dirs["la"]))
        new = wait_for(
            lambda: shared_versions(both, restarted_at), 240, "a version both published after the rejoin", logs
        )
        assert chunks(dirs["la"], new[0]) == chunks(dirs["lb"], new[0])
        assert common  # (the first phase's versions, for the failure message above)
