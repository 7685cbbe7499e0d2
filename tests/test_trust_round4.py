"""The low items of issue #57, each on the real parts: a caught key's groups already drawn into the step are dropped
(the real tiny model, task, spot checker and learner loop); the `sampler_kl` alert has an absolute bound, so liars
cannot hide each other; a sampler splits its groups across the run's learners evenly, whatever credit a learner
claims; `status` flags a card of another owner; a node's process exits 0 on SIGTERM before its loop runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from card_helpers import card_of as make_card
from learner_helpers import FAST, copy_of, signal_groups
from verify_helpers import CLEAN, checked_loop

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.model.models import load_tokenizer
from swarmnode.observe.sampler_kl import kl_alerts
from swarmnode.sampler.build import build_engine
from swarmnode.tasks import build_task


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST + ["trust.verify_fraction=0.05", "sampler.max_completion_length=8"])


def test_a_liar_caught_in_a_step_loses_its_groups_already_drawn_into_it(cfg):
    parts = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)
    groups = signal_groups(cfg, parts, cfg.learner.prompts_per_step)
    loop = checked_loop(cfg, parts)
    liar = Identity.generate()
    for _ in range(10_000):  # a patient liar: established, checked at the floor rate
        loop.verifier.judge(liar.peer_id, CLEAN)
    for g in groups:
        lied = copy_of(g, liar, logprobs=[[max(-30.0, x - 0.5) for x in lp] for lp in g.logprobs])
        assert loop.buffer.add(lied) == "ok"
    diag = loop.step()  # alone in the buffer: half its groups pass unchecked first, the rest are checked
    assert diag is not None and loop.rejected["logprob_mismatch"] >= 1
    assert diag["groups"] == 0.0, diag  # the unchecked ones drawn before the catch are dropped too
    assert loop.rejected["liar_drawn"] >= 1


def test_several_liars_cannot_hide_each_other_from_the_kl_alert():
    liars = [f"liar-{i}" for i in range(8)]
    learner = {
        "peer_id": "L" * 20,
        "health": {"verified_peers": [*liars, "honest-a", "honest-b"], "verified_kl": [0.3] * 8 + [0.001, 0.0]},
    }
    named = {a["peer_id"] for a in kl_alerts([learner])}
    assert named == set(liars), named  # the median of the others is a liar's: the absolute bound names them all
    learner["health"]["verified_kl"] = [0.002] * 8 + [0.001, 0.0]  # bf16-like: nobody
    assert not kl_alerts([learner])


def test_a_sampler_splits_its_groups_evenly_whatever_credit_a_learner_claims():
    from swarmnode.swarm.rollout_push.send import SPREAD_OUTBOX, RolloutSender, _Link

    sender = RolloutSender(None, "run", spread=True)  # type: ignore[arg-type]
    greedy, honest = Identity.generate(), Identity.generate()
    links = {}
    for who in (greedy, honest):
        from hivemind.p2p import PeerID

        link = links[who.peer_id] = _Link(PeerID.from_base58(who.peer_id), 1024)
        link.last_ack = time.monotonic()
    links[greedy.peer_id].credit = 1 << 20  # claims to want everything
    links[honest.peer_id].credit = 2
    sender._links = links
    for i in range(2 * SPREAD_OUTBOX - 2):
        sender._send(f"g{i}", b"x", 0.0)
    sizes = {k: len(link.outbox) for k, link in links.items()}
    assert sizes[greedy.peer_id] == sizes[honest.peer_id] == SPREAD_OUTBOX - 1, sizes
    for i in range(10):  # the greedy one holds its groups ("full"): its outbox is at the bound, the rest go on
        links[honest.peer_id].outbox.clear()
        sender._send(f"h{i}", b"x", 0.0)
    assert len(links[greedy.peer_id].outbox) == SPREAD_OUTBOX, sizes


def test_status_flags_a_card_of_the_same_version_from_another_owner():

    from swarmnode.observe.card_view import card_of, with_card

    owner, other = Identity.generate(), Identity.generate()
    card = make_card(owner, 3)
    doc = {
        "alerts": [],
        "peers": [
            {"peer_id": "ours", "role": "sampler", "software": f"swarmnode/0.1.0 card/3/{owner.peer_id[-8:]}"},
            {"peer_id": "theirs", "role": "sampler", "software": f"swarmnode/0.1.0 card/3/{other.peer_id[-8:]}"},
            {"peer_id": "older", "role": "sampler", "software": "swarmnode/0.1.0 card/3"},  # an older node's field
        ],
    }
    alerts = [a for a in with_card(doc, card)["alerts"] if a["kind"] == "old_card"]
    assert [a["peer_id"] for a in alerts] == ["theirs"] and "another owner" in alerts[0]["message"]
    assert card_of("swarmnode/0.1.0 card/3") == (3, None) and card_of("swarmnode/0.1.0") == (None, None)


@pytest.mark.parametrize("after_s", [0.3, 1.5])
@pytest.mark.usefixtures("starts_processes")
def test_a_node_exits_0_on_sigterm_while_it_is_still_starting(tmp_path, after_s):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "SWARMNODE_HOME": str(tmp_path)}
    nobody = f"/ip4/127.0.0.1/tcp/9/p2p/{Identity.generate().peer_id}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmnode", "join", "--config", "tiny-cpu", "--role", "learner"]
        + ["--initial-peers", nobody, "--set", f"data_dir={tmp_path}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        time.sleep(after_s)  # past the interpreter's own start: in the CLI's imports, or its config, or its loop
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
