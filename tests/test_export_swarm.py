"""The model out of a real run: `swarmnode host` (bootstrap + learner) and a sampler joined by its invite train the
tiny model; `swarmnode export <invite>` while it runs fetches the newest version from the run's peers and
`swarmnode export <learner data dir>` after it stops reads it from disk; both directories load with
`from_pretrained` and give the learner's own next-token log-probs of their version; a version nobody holds is one
line (exit 3); `swarmnode eval` scores the exported model above the untrained base, paired over the same prompts."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
import torch
from test_host_invite import learner_rewards, machine_env, swarmnode, wait_for

from swarmnode.export.versions import read_version
from swarmnode.local.swarm import spawn_node
from swarmnode.swarm.weights import WeightStore
from tests.swarm_helpers import FAST_NET, NodeProc

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

STEPS = 120  # learner steps before the export while running
PROMPT = torch.tensor([[7, 8, 9, 10, 11, 12, 13]])


def same_logprobs(directory: Path, store_root: Path, run_id: str, version: int) -> None:
    """The exported directory's next-token log-probs equal those of the learner's own weights of `version`."""
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(directory)
    own = AutoModelForCausalLM.from_pretrained(directory)  # the architecture; the learner's tensors go in
    found = read_version(WeightStore(store_root, run_id), version, "the learner's store")
    own.load_state_dict({k: v.clone() for k, v in found.state.items()})
    with torch.no_grad():
        a, b = (torch.log_softmax(m(PROMPT).logits.float(), -1) for m in (exported, own))
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()


@pytest.mark.slow  # CI's long-scenario step runs it (.ci/run)
@pytest.mark.timeout(1200)
def test_export_from_a_live_run_and_from_the_learners_directory_load_and_match_and_eval_beats_the_base(tmp_path):
    run_id = f"exp-{secrets.token_hex(3)}"
    # a version every 4 steps, all kept: the learner's own weights of an exported version are still there to compare
    sets = [f"run_id={run_id}", *FAST_NET, "learner.publish_every=4", "learner.keep_versions=200"]
    set_args = [a for s in sets for a in ("--set", s)]
    procs: list[NodeProc] = []

    def spawn(name: str, args: list[str], env: dict | None = None) -> NodeProc:
        p = spawn_node(tmp_path, name, args, separate_stderr=True, env=env, threads=1)
        proc = NodeProc(p.name, p.popen, p.log, p.err)
        procs.append(proc)
        return proc

    try:
        host = spawn("host", ["host", "--config", "tiny-cpu", *set_args, "--owner-key", str(tmp_path / "owner.key")])
        invite = host.wait_line("invite: swarmnode join ", timeout=180)
        card = json.loads((Path(os.environ["SWARMNODE_HOME"]) / "host" / run_id / "card.json").read_text())
        (learner_key,) = card["settings"]["trust"]["learner_keys"]
        learner_dir = Path(os.environ["SWARMNODE_HOME"]) / run_id / learner_key
        spawn("s1", ["join", invite], env=machine_env(tmp_path, "s1")).ready_fields(timeout=180)
        wait_for(
            lambda: len(learner_rewards(learner_dir / "learner_steps.jsonl")) >= STEPS,
            600,
            f"{STEPS} learner steps",
            lambda: host.stdout()[-3000:] + host.stderr()[-2000:],
        )

        live = swarmnode("export", invite, "--out", str(tmp_path / "live"), "--json")
        assert live.returncode == 0, live.stderr
        live_doc = json.loads(live.stdout)
        assert live_doc["signer"] == learner_key and live_doc["kind"] == "model", live_doc
        assert f"run {run_id}" in live_doc["source"]
        same_logprobs(tmp_path / "live", learner_dir / "weights", run_id, live_doc["version"])

        missing = swarmnode("export", invite, "--out", str(tmp_path / "none"), "--version", "999999")
        lines = missing.stderr.strip().splitlines()
        assert missing.returncode == 3 and len(lines) == 1 and "held by none" in lines[0], missing.stderr
        assert not (tmp_path / "none").exists()
    finally:
        for proc in reversed(procs):
            proc.stop(timeout=120)

    after = swarmnode("export", str(learner_dir), "--out", str(tmp_path / "after"), "--json")
    assert after.returncode == 0, after.stderr
    after_doc = json.loads(after.stdout)
    assert after_doc["version"] >= live_doc["version"] and after_doc["signer"] == learner_key
    same_logprobs(tmp_path / "after", learner_dir / "weights", run_id, after_doc["version"])
    readme = (tmp_path / "after" / "README.md").read_text()
    assert run_id in readme and learner_key in readme and "run card digest" in readme

    scored = swarmnode("eval", "--model", str(tmp_path / "after"), "--samples", "16", "--json")
    assert scored.returncode == 0, scored.stderr
    doc = json.loads(scored.stdout)
    paired = doc["paired"]
    print(json.dumps(doc, indent=1))
    assert doc["model_scores"]["eval_reward"] > doc["base_scores"]["eval_reward"], doc
    assert paired["mean_diff"] > 0 and paired["better"] > paired["worse"], paired
