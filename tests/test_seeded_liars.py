"""Issue #57's liars against a run of seeded groups (`trust.seeded_groups`), real processes on 127.0.0.1: a
bootstrap, a learner and an honest sampler (tiny-cpu; the learner publishes no new version, so every claim is the
version the liars hold), and three liars in this process (`seeded_liars`): chosen text with honest log-probs, honest
samples sent selectively, and a prompt of its own choice. Each has at most 10 % of its groups trained and is named
in the learner's log; the honest sampler is never named and keeps training."""

from __future__ import annotations

import asyncio
import re

import pytest
from restart_helpers import WORK, learner_args, steps, wait_rows
from seeded_liars import liar_groups, push_all
from swarm_helpers import LocalSwarm

from swarmnode.config import load_config
from swarmnode.identity import Identity

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

SETS = ["trust.seeded_groups=true", "learner.publish_every=100000"]  # one version: every claim checkable
PER_LIAR = 24


@pytest.mark.slow  # a bootstrap, a learner and a sampler, three liars' generation: ~2 min on 2 cores
@pytest.mark.timeout(900)
def test_chosen_text_selective_and_prompt_picking_liars_are_refused_and_named(tmp_path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    with LocalSwarm(tmp_path, extra_sets=SETS) as swarm:
        swarm.bootstrap()
        learner = swarm.join("learner", "learner", wait=False, **learner_args(tmp_path))
        learner_id = learner.ready_fields(timeout=300)["peer_id"]
        sampler_proc = swarm.join(
            "sampler", "sampler", work=True, wait=False, extra=[*WORK, "--set", f"data_dir={tmp_path / 'sampler'}"]
        )
        sampler_id = sampler_proc.ready_fields(timeout=300)["peer_id"]
        wait_rows(steps_file, lambda rows: len(rows) >= 3, 180, "3 learner steps")
        addr = next(p for p in swarm.status()["peers"] if p["peer_id"] == learner_id)["addrs"][0]
        cfg = load_config("tiny-cpu", [*WORK[3:][::2], *SETS, f"run_id={swarm.run_id}"])
        liars = {kind: Identity.generate() for kind in ("chosen", "selective", "prompt")}
        acks = {}
        for kind, who in liars.items():
            groups = liar_groups(cfg, kind, who, learner_id, PER_LIAR)
            acks[kind] = asyncio.run(push_all(tmp_path, f"{addr}/p2p/{learner_id}", swarm.run_id, who, groups))
        seen = len(steps(steps_file))
        wait_rows(steps_file, lambda rows: len(rows) >= seen + 15, 240, "15 steps after the liars")
        out = learner.stdout()
    rows = steps(steps_file)
    trained = {who.peer_id: 0 for who in liars.values()} | {sampler_id: 0}
    for row in rows:
        for sid, valid in zip(row.get("sampler_ids", []), row.get("sampler_valid", [])):
            if sid in trained and row.get("trained"):
                trained[sid] += valid
    for kind, who in liars.items():
        assert acks[kind].get("ok", 0) >= 1, (kind, acks[kind])  # past the door: they look like honest groups
        assert trained[who.peer_id] <= 0.1 * PER_LIAR, (kind, trained[who.peer_id], acks[kind])
        named = re.findall(rf"caught sampler {who.peer_id} claiming version \d+: (\w+)", out)
        assert named, f"{kind}: never named; acks {acks[kind]}\n{out[-3000:]}"
        print(f"{kind}: acks {dict(acks[kind])}; trained {trained[who.peer_id]} of {PER_LIAR}; named: {named[0]}")
    assert f"caught sampler {sampler_id}" not in out
    assert trained[sampler_id] >= 10
