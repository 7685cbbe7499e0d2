"""SAPO's defence against steering by honestly scored text (issue #40): the plausibility decision and the per-peer
distrust on their own, and a real warm-started tiny policy refusing the marker attack's groups (then giving the
attacker no place in its batches) while keeping an honest same-model peer's."""

from __future__ import annotations

import random

import pytest
import torch
from sapo_marker_peer import marker_group

from swarmnode.config import ConfigError, load_config
from swarmnode.identity import Identity
from swarmnode.node.sapo.distrust import MIN_OUTCOMES, RECORD, PeerDistrust
from swarmnode.node.sapo.plausibility import PlausibilityCheck, mean_logprob
from swarmnode.node.sapo.policy import SapoPolicy
from swarmnode.node.sapo.pool import ExternalPool
from swarmnode.tasks import ArithmeticTask


# ---- the decision --------------------------------------------------------------------------------------------
def test_no_floor_until_enough_own_samples_then_quantile_less_margin():
    check = PlausibilityCheck(quantile=0.1, margin=0.5, window=100, min_samples=10)
    check.observe([[-1.0, -1.0]] * 9)
    assert check.floor() is None
    assert check.admit("p", [[-50.0]]) and check.unchecked == 1  # nothing to judge by yet: counted, let through
    check.observe([[-1.0 - k / 10] for k in range(11)])  # 20 own completions: -1.0 x 10, then -1.1 ... -2.0
    ordered = sorted([-1.0] * 10 + [-1.0 - k / 10 for k in range(1, 11)])
    assert check.floor() == pytest.approx(ordered[int(0.1 * 19)] - 0.5)


def test_a_group_is_refused_if_any_completion_is_below_the_floor_and_counted_per_peer():
    check = PlausibilityCheck(quantile=0.0, margin=1.0, window=8, min_samples=4)
    check.observe([[-1.0, -2.0], [-1.0], [-0.5], [-2.0, -1.0, -1.5]])  # means -1.5, -1, -0.5, -1.5: floor -2.5
    assert check.floor() == pytest.approx(-2.5)
    assert check.admit("honest", [[-2.0, -3.0], [-0.1]])  # mean exactly -2.5: at the floor is plausible
    assert not check.admit("marker", [[-0.1], [-0.2], [-6.0, -0.5]])  # one completion of mean -3.25 sinks it
    assert not check.admit("marker", [[-9.0]])
    assert check.refused == {"marker": 2} and check.passed == {"honest": 1}


def test_the_floor_follows_the_latest_own_samples():
    check = PlausibilityCheck(quantile=0.0, margin=0.0, window=4, min_samples=4)
    check.observe([[-5.0]] * 4)
    assert check.admit("p", [[-4.0]])
    check.observe([[-1.0]] * 4)  # the policy sharpened: the old samples have left the window
    assert check.floor() == -1.0 and not check.admit("p", [[-4.0]])
    assert mean_logprob([]) == 0.0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        PlausibilityCheck(quantile=1.0)
    with pytest.raises(ValueError):
        PlausibilityCheck(window=8, min_samples=9)
    with pytest.raises(ConfigError, match="plausibility_min_samples"):
        load_config("tiny-cpu", ["sapo.plausibility_window=8", "sapo.plausibility_min_samples=9"])


# ---- the per-peer distrust -------------------------------------------------------------------------------------
def test_a_peer_is_distrusted_once_too_many_of_its_recent_groups_are_refused_then_released():
    now = [0.0]
    distrust = PeerDistrust(max_refused_share=0.25, seconds=60, clock=lambda: now[0])
    for _ in range(MIN_OUTCOMES - 1):
        distrust.record("bad", False)
    assert distrust.distrusted() == set()  # too few outcomes to judge
    distrust.record("bad", False)
    for k in range(RECORD):
        distrust.record("honest", k % 8 != 7)  # 1 in 8 refused: 12.5 %, under the 25 % share
    assert distrust.distrusted() == {"bad"} and distrust.episodes == {"bad": 1}
    now[0] = 61.0
    assert distrust.distrusted() == set()  # released, its record starts afresh
    distrust.record("bad", False)
    assert distrust.distrusted() == set()
    with pytest.raises(ValueError):
        PeerDistrust(max_refused_share=1.5)


def test_the_pool_hands_out_no_group_of_an_excluded_peer():
    pool = ExternalPool("me", per_peer=4, max_age=60)
    bad, good = Identity.generate(), Identity.generate()
    prompts = ArithmeticTask().sample(4, random.Random(1))
    for prompt in prompts:
        pool.add(marker_group(bad, "tiny-demo", prompt))
        pool.add(marker_group(good, "tiny-demo", prompt))
    taken = pool.take(8, 4, exclude={bad.peer_id})
    assert {g.sampler_id for g in taken} == {good.peer_id} and len(taken) == 4
    assert pool.peers() == [bad.peer_id]  # its groups stay, to age out


# ---- a real policy ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pair():
    """Two warm-started tiny policies of one model (the tiny-cpu preset), each with its own seed."""
    torch.manual_seed(0)
    cfg = load_config("tiny-cpu", [])
    return SapoPolicy(cfg, Identity.generate(), seed=0), SapoPolicy(cfg, Identity.generate(), seed=1)


def test_a_fresh_node_takes_no_peer_group_before_it_has_a_floor(pair):
    cfg = pair[0].cfg
    node = SapoPolicy(cfg, Identity.generate(), seed=5, model=pair[0].model, tokenizer=pair[0].tokenizer)
    attacker = Identity.generate()
    for prompt in node.task.sample(4, random.Random(3)):
        node.receive(marker_group(attacker, cfg.run_id, prompt))
    assert node.train_step() is None and len(node.pool) == 4  # held, not trained on unchecked
    node.generate()
    assert node.plausibility.floor() is not None
    diag = node.train_step()
    assert diag["external_groups"] == 0 and node.counters()["implausible_by_peer"] == {attacker.peer_id: 2}


def test_marker_groups_are_refused_and_an_honest_peers_are_kept(pair):
    """The marker attack's groups (true rewards, chosen text) are refused by the victim; the groups an honest peer
    of the same model samples pass, round after round while both train."""
    victim, honest = pair
    attacker = Identity.generate()
    rng = random.Random(7)
    for _ in range(6):
        for group in honest.generate():
            victim.receive(group)
        victim.generate()
        for prompt in victim.task.sample(4, rng):
            victim.receive(marker_group(attacker, victim.cfg.run_id, prompt))
        victim.train_step()
        honest.train_step()
    counts = victim.counters()
    # every batch offered it 2 of J=4 slots until 8 refusals made it distrusted: no slot since
    assert counts["implausible_by_peer"][attacker.peer_id] == MIN_OUTCOMES
    assert counts["distrusted"] == [attacker.peer_id]
    assert attacker.peer_id not in counts["external_by_peer"]
    assert counts["external_by_peer"][honest.identity.peer_id] >= 10  # of 12: at most a rare tail refused
    assert counts["rejected"]["implausible"] == sum(counts["implausible_by_peer"].values())
    assert counts["plausibility_floor"] < 0
