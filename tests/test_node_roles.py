"""The role decision under a race, and per-node data directories (real bootstrap and `join` processes on
127.0.0.1): two nodes that can both train, started together with `--role auto` in a run that wants one learner,
end as one learner and one sampler; each keeps its checkpoint and weight store under its own peer id."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from swarm_helpers import LocalSwarm, assert_ready_after

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.node.join import keeps_learner_role, node_data_dir
from swarmnode.protocol.peer import PeerRecord

WORK = ["--config", "tiny-cpu", "--set", "model.tiny.warm_start_steps=20"]


@pytest.mark.slow  # CI: .ci/run
@pytest.mark.usefixtures("starts_processes")
def test_two_auto_nodes_racing_for_one_learner_slot_end_as_learner_and_sampler(tmp_path):
    home = Path(os.environ["SWARMNODE_HOME"])
    with LocalSwarm(tmp_path, run_id="race-run") as swarm:
        swarm.bootstrap()
        nodes = [swarm.join(name, "auto", work=True, wait=False, extra=WORK) for name in ("a", "b")]
        fields = [node.ready_fields(180) for node in nodes]
        assert sorted(f["role"] for f in fields) == ["learner", "sampler"], [n.stdout()[-1500:] for n in nodes]
        for node, f in zip(nodes, fields):  # `ready` once its model is loaded and it has a version
            assert_ready_after(node.stdout(), "loading the model...", f"{f['role']} ready: version 0")
        dirs = [home / "race-run" / f["peer_id"] for f in fields]
        assert dirs[0] != dirs[1] and all((d / "weights").is_dir() for d in dirs), dirs
        learner = next(n for n, f in zip(nodes, fields) if f["role"] == "learner")
        assert learner.stop() == 0, learner.stderr()[-2000:]  # leaves with a checkpoint in its own directory
        learner_dir, sampler_dir = dirs if fields[0]["role"] == "learner" else dirs[::-1]
        assert (learner_dir / "checkpoints").is_dir() and not (sampler_dir / "checkpoints").exists()


def record(identity: Identity, uptime: float | None = None) -> PeerRecord:
    health = {} if uptime is None else {"uptime": uptime}
    return PeerRecord.create(identity, role="learner", version=0, versions=[], hardware={}, health=health)


def test_the_step_back_rule_gives_racing_nodes_the_same_answer():
    a, b, c = sorted((Identity.generate() for _ in range(3)), key=lambda i: i.peer_id)
    racing = [record(a), record(b)]
    assert keeps_learner_role(a.peer_id, racing, 1) and not keeps_learner_role(b.peer_id, racing, 1)
    assert keeps_learner_role(b.peer_id, racing, 2)
    settled = [record(c, uptime=40.0), record(a)]  # c passed its check earlier: it stays first
    assert not keeps_learner_role(a.peer_id, settled, 1)


def test_two_identities_on_one_machine_get_separate_data_dirs():
    cfg = load_config("tiny-cpu", ["run_id=dirs"])
    a, b = Identity.generate(), Identity.generate()
    assert node_data_dir(cfg, a) != node_data_dir(cfg, b)
    assert node_data_dir(cfg, a).parent == cfg.resolved_data_dir()  # the run dir stays the parent
    explicit = load_config("tiny-cpu", ["data_dir=/tmp/x"])
    assert node_data_dir(explicit, a) == node_data_dir(explicit, b) == Path("/tmp/x")  # what the user asked for
