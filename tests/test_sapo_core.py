"""SAPO mode, network-free: the external pool's per-peer bounds, re-tokenising and re-scoring peers' text, and
two policies of different sizes training on each other's rollouts (real tiny models, no mocks)."""

from __future__ import annotations

import math

import pytest
import torch

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.node.sapo.policy import SapoPolicy
from swarmnode.node.sapo.pool import ExternalPool
from swarmnode.protocol.text_rollout import TextRolloutGroup

ME, PEER, FLOODER, LIAR = (Identity.generate() for _ in range(4))
SMALL = ["model.tiny.hidden_size=64", "model.tiny.num_attention_heads=1", "model.tiny.intermediate_size=128"]


def _text(
    identity: Identity,
    prompt_id: str = "add:3:5",
    completions=("8", "7"),
    rewards=None,
    text=None,
    finished=None,
    created_at=None,
    temperature=1.0,
) -> TextRolloutGroup:
    from swarmnode.tasks import arithmetic_reward

    ref = str(sum(int(x) for x in prompt_id.split(":")[1:]))
    return TextRolloutGroup.create(
        identity=identity,
        run_id="tiny-demo",
        prompt_id=prompt_id,
        prompt_text=text or "{}+{}=".format(*prompt_id.split(":")[1:]),
        completions=list(completions),
        finished=finished or [True] * len(completions),
        rewards=rewards if rewards is not None else [arithmetic_reward(c, ref) for c in completions],
        seq_logprobs=[-1.5] * len(completions),
        temperature=temperature,
        model_id="test#0",
        created_at=created_at,
    )


# ---- the pool ---------------------------------------------------------------------------------------------
def test_a_flooding_peer_never_holds_more_than_its_bound_of_a_batch():
    pool = ExternalPool(ME.peer_id, per_peer=4, max_age=60)
    for i in range(50):
        pool.add(_text(FLOODER, completions=(str(i), "7")))
    pool.add(_text(PEER))
    assert pool.by_peer[FLOODER.peer_id]["overflow"] == 46  # only the newest 4 are kept
    batch = pool.take(8, max_per_peer=2)
    senders = [g.sampler_id for g in batch]
    assert senders.count(FLOODER.peer_id) == 2 and senders.count(PEER.peer_id) == 1
    assert batch[0].completions[0] == "49" or batch[1].completions[0] == "49"  # newest first
    assert pool.by_peer[FLOODER.peer_id]["taken"] == 2


def test_pool_dedups_ignores_own_groups_and_ages_out():
    now = [0.0]
    pool = ExternalPool(ME.peer_id, per_peer=8, max_age=10, clock=lambda: now[0])
    group = _text(PEER)
    assert pool.add(group) == "ok" and pool.add(group) == "duplicate"
    assert pool.add(_text(ME)) == "own"
    now[0] = 11.0
    assert pool.take(4, max_per_peer=4) == [] and pool.counters["expired"] == 1


# ---- re-tokenising, re-scoring, weighting -----------------------------------------------------------------
@pytest.fixture(scope="module")
def small_policy():
    torch.manual_seed(0)
    cfg = load_config(
        "tiny-cpu",
        [
            *SMALL,
            "model.tiny.warm_start_steps=0",
            "sapo.local_groups=2",
            "sapo.external_groups=4",
            "sapo.max_groups_per_peer=2",
        ],
    )
    return SapoPolicy(cfg, ME, seed=0)


def test_rescoring_refuses_foreign_and_eval_prompts_and_counts_lies(small_policy):
    policy = small_policy
    eval_id = policy.task.eval_prompts()[0].prompt_id
    train_id = next(
        p.prompt_id for p in policy.task.sample(50, __import__("random").Random(1)) if p.prompt_id != eval_id
    )
    a, b = train_id.split(":")[1:]
    liar = _text(LIAR, train_id, completions=("0", "1"), rewards=[1.0, 1.0])  # claims full marks for wrong sums
    honest = _text(PEER, train_id, completions=(str(int(a) + int(b)), "x"), finished=[True, False])
    refused = [_text(PEER, "add:99:1"), _text(PEER, eval_id), _text(PEER, train_id, text="1+1=")]
    out = policy.rescorer.convert([liar, honest, *refused])
    assert [g.sampler_id for g in out] == [LIAR.peer_id, PEER.peer_id]
    assert dict(policy.rescorer.rejected) == {"unknown_prompt": 1, "eval_prompt": 1, "prompt_mismatch": 1}
    assert policy.rescorer.lies == {LIAR.peer_id: 1}
    assert out[0].rewards[0] < 1.0 and out[1].rewards[0] == 1.0  # our task's rewards, not the claims
    eos = policy.tokenizer.eos_token_id
    assert out[1].completions[0][-1] == eos and eos not in out[1].completions[1]  # EOS only where it finished
    assert out[1].prompt_tokens == policy.learner.rows.prompt_tokens(f"{a}+{b}=")


def test_external_weighting_choices(small_policy):
    policy = small_policy
    group = _text(PEER, "add:2:3", completions=("5", "41"))
    on_policy = policy.rescorer.convert([group])[0]
    policy.rescorer.weighting = "sender_likelihood"
    try:
        sender = policy.rescorer.convert([group])[0]
    finally:
        policy.rescorer.weighting = "on_policy"
    # sender_likelihood: the sender's sequence log-likelihood (-1.5) spread over this node's tokens of the text
    for comp, lq in zip(sender.completions, sender.logprobs):
        assert len(lq) == len(comp) and math.isclose(sum(lq), -1.5, abs_tol=1e-9)
    # on_policy: this node's own current log-probs, so the importance ratio of the loss is exactly 1
    from swarmnode.model.logprobs import completion_logprobs

    with torch.no_grad():
        logp, _ = completion_logprobs(
            policy.model, [on_policy.prompt_tokens] * 2, on_policy.completions, 1.0, policy.tokenizer.pad_token_id
        )
    for i, lq in enumerate(on_policy.logprobs):
        assert lq == pytest.approx(logp[i, : len(lq)].tolist(), abs=1e-5)


def test_sender_likelihood_keeps_the_senders_temperature_and_refuses_truncated_text(small_policy):
    policy = small_policy
    limit = policy.cfg.sampler.max_completion_length
    warm = _text(PEER, "add:2:3", completions=("5", "41"), temperature=0.7)
    long = _text(PEER, "add:2:3", completions=("5", "4" * (limit + 3)))
    assert policy.rescorer.convert([warm])[0].temperature == policy.cfg.sampler.temperature  # on_policy: ours
    assert len(policy.rescorer.convert([long])[0].completions[1]) == limit  # on_policy: cut to our limit
    policy.rescorer.weighting = "sender_likelihood"
    try:
        assert policy.rescorer.convert([warm])[0].temperature == pytest.approx(0.7)  # q was taken at it
        assert policy.rescorer.convert([long]) == []  # its likelihood is of text we would not keep
        assert policy.rescorer.rejected["truncated_likelihood"] == 1
    finally:
        policy.rescorer.weighting = "on_policy"
        policy.rescorer.rejected.clear()


def test_on_policy_behaviour_is_computed_in_the_learners_precision(small_policy):
    from swarmnode.model.logprobs import completion_logprobs
    from swarmnode.node.sapo.rescore import Rescorer

    policy = small_policy
    half = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731  (a learner's autocast)
    rescorer = Rescorer(
        policy.model,
        policy.tokenizer,
        policy.task,
        policy.cfg.sampler,
        policy.cfg.sapo,
        policy.learner.rows.prompt_tokens,
        lambda: 0,
        autocast=half,
    )
    group = rescorer.convert([_text(PEER, "add:2:3", completions=("5", "41"))])[0]
    with torch.no_grad(), half():
        logp, _ = completion_logprobs(
            policy.model, [group.prompt_tokens] * 2, group.completions, 1.0, policy.tokenizer.pad_token_id
        )
    for i, lq in enumerate(group.logprobs):
        assert lq == pytest.approx(logp[i, : len(lq)].float().tolist(), abs=1e-6)


def test_sender_likelihood_with_token_level_weights_is_refused():
    from swarmnode.config import ConfigError

    with pytest.raises(ConfigError, match="sender_likelihood"):
        load_config(
            "tiny-cpu", ["sapo.external_weighting=sender_likelihood", "learner.importance_sampling_level=token"]
        )


def test_two_sizes_train_on_each_others_text(small_policy):
    big_cfg = load_config(
        "tiny-cpu",
        [
            "model.tiny.warm_start_steps=0",
            "sapo.local_groups=2",
            "sapo.external_groups=4",
            "sapo.max_groups_per_peer=2",
            "sapo.external_weighting=sender_likelihood",
        ],
    )
    big = SapoPolicy(big_cfg, PEER, seed=1)
    small = small_policy
    assert big.model_id != small.model_id
    for _ in range(3):
        texts = {big: big.generate(), small: small.generate()}
        for group in texts[big]:
            small.receive(TextRolloutGroup.decode(group.encode(), _limits(small)))
        for group in texts[small]:
            big.receive(group)
        before = [p.detach().clone() for p in big.model.parameters()]
        for policy in (big, small):
            diag = policy.train_step()
            assert diag is not None and diag["local_groups"] == 2 and diag["external_groups"] == 2
        assert any(not torch.equal(a, b) for a, b in zip(before, big.model.parameters()))
    assert big.counters()["external_by_peer"] == {ME.peer_id: 6}
    assert small.counters()["external_by_peer"][PEER.peer_id] == 6


def _limits(policy):
    from swarmnode.protocol.text_rollout import TextRolloutLimits

    return TextRolloutLimits.from_config(policy.cfg)
