"""Seeded groups on the real parts (the tiny model, task, engine, spot checker and learner loop): a group's prompt
and tokens come from a seed its sampler cannot pick, the learner replays a checked group's draws from its own
logits, refuses a chosen prompt, distrusts a key that keeps back its groups, and flags text far less likely than
the policy's own samples; a sampler on an engine that cannot draw replayably says so before it starts."""

from __future__ import annotations

import pytest
import torch
from group_helpers import copy_of
from learner_helpers import FAST

from swarmnode.config import load_config
from swarmnode.errors import UsageError
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.draw_check import GAP_SLACK, DrawLedger, judge_draws, refusal
from swarmnode.learner.loop import LearnerLoop
from swarmnode.learner.typicality import TypicalityWatch
from swarmnode.model.draws import completion_seeds, draw_tokens, group_seed, seeded_prompt, uniforms
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.model.replay import draw_gaps, replay_scores
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.sampler.seeded import unreplayed_line
from swarmnode.tasks import build_task

SEEDED = ["trust.seeded_groups=true", "trust.verify_fraction=0.05", "sampler.max_completion_length=8"]


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST + SEEDED)


@pytest.fixture(scope="module")
def parts(cfg):
    return build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)


@pytest.fixture(scope="module")
def honest(cfg, parts):
    """A sampler's seeded groups (3 batches of 4) and its identity."""
    task, _, engine = parts
    who, out = Identity.generate(), []
    sampler = SamplerLoop(
        engine, task, cfg.sampler, cfg.run_id, who, out.append, seed=3, seeded=cfg.trust.seeded_groups, stream=2
    )
    for _ in range(3):
        sampler.step()
    return who, out


def replayed(engine, group):
    scores = replay_scores(
        engine.model, [group.prompt_tokens] * len(group.completions), group.completions, group.temperature, 0
    )
    seed = group_seed(group.run_id, group.sampler_id, *group.draw[:2])
    return scores, draw_gaps(scores, completion_seeds(seed, len(group.completions)))


def marker_liar(group, who: Identity, engine, marker: list[int]) -> RolloutGroup:
    """Half of `group`'s completions replaced by `marker`, every log-prob honestly recomputed."""
    comps = [marker if j % 2 else c for j, c in enumerate(group.completions)]
    with torch.no_grad():
        scores = completion_scores(engine.model, [group.prompt_tokens] * len(comps), comps, group.temperature, 0)
    lps = [scores.logp[j, : len(c)].tolist() for j, c in enumerate(comps)]
    return copy_of(group, who, completions=comps, logprobs=lps)


def test_uniforms_and_the_inverse_cdf_draw_the_policy_distribution():
    u = uniforms(torch.arange(20_000), torch.zeros(20_000, dtype=torch.long))
    assert 0 < float(u.min()) and float(u.max()) < 1 and abs(float(u.mean()) - 0.5) < 0.01
    assert torch.equal(u[:5], uniforms(torch.arange(5), torch.zeros(5, dtype=torch.long)))  # any batch, same numbers
    z = torch.tensor([0.0, 1.0, 2.0, -1.0]).expand(20_000, 4)
    share = torch.bincount(draw_tokens(z, u), minlength=4) / 20_000
    assert torch.allclose(share, torch.softmax(z[0], 0), atol=0.015), share


def test_a_seeded_group_is_its_seeds_prompt_and_draws_and_replays_exactly(cfg, parts, honest):
    task, _, engine = parts
    who, groups = honest
    assert [g.draw for g in groups] == [(2, c, 1) for c in range(12)]  # stream 2, counters 0.. in order
    for g in groups:
        assert g.prompt_id == seeded_prompt(task, group_seed(cfg.run_id, who.peer_id, 2, g.draw[1])).prompt_id
        scores, gaps = replayed(engine, g)
        assert float(gaps.max()) == 0.0  # the same engine's numbers: every token inside its interval
        assert judge_draws(gaps, scores.mask, cfg.trust.draw_tolerance)[2]
        assert refusal(g, task, cfg.trust, None) is None
    again: list = []
    SamplerLoop(
        engine, task, cfg.sampler, cfg.run_id, who, again.append, seed=99, seeded=cfg.trust.seeded_groups, stream=2
    ).step()
    assert [g.completions for g in again] == [g.completions for g in groups[:4]]  # the seed fixes them
    wire = RolloutGroup.decode(groups[0].encode(), RolloutLimits(vocab_size=1 << 16))
    assert wire.draw == groups[0].draw and wire.group_id == groups[0].group_id


def test_the_draw_field_is_checked_on_the_wire(honest):
    who, groups = honest
    bad = copy_of(groups[0], who, draw=(0, 1, 2))
    with pytest.raises(InvalidRecord, match="draw"):
        RolloutGroup.decode(bad.encode(), RolloutLimits(vocab_size=1 << 16))
    plain = copy_of(groups[0], who, draw=None)  # an unseeded group's bytes have no draw field
    assert b"draw" not in plain.encode() and RolloutGroup.decode(plain.encode(), RolloutLimits(1 << 16)).draw is None


def test_chosen_text_with_honest_logprobs_is_not_drawn_and_a_chosen_prompt_is_refused(cfg, parts, honest):
    task, tokenizer, engine = parts
    who, groups = honest
    marker = tokenizer.encode("ZZZZ", add_special_tokens=False)
    caught = 0
    for g in groups:
        lied = marker_liar(g, who, engine, marker)
        scores, gaps = replayed(engine, lied)
        caught += not judge_draws(gaps, scores.mask, cfg.trust.draw_tolerance)[2]
    assert caught == len(groups)
    other = next(p for p in (task.sample(1, __import__("random").Random(i))[0] for i in range(50)))
    picked = [copy_of(g, who, prompt_id=other.prompt_id) for g in groups if g.prompt_id != other.prompt_id]
    assert picked and all(refusal(g, task, cfg.trust, None) == "seed_prompt" for g in picked)
    assert refusal(copy_of(groups[0], who, draw=None), task, cfg.trust, None) == "unseeded"
    unreplayed = copy_of(groups[0], who, draw=(*groups[0].draw[:2], 0))
    assert refusal(unreplayed, task, cfg.trust, None) == "unreplayed"
    accepting = cfg.trust.model_copy(update={"accept_unreplayed": True})
    assert refusal(unreplayed, task, accepting, None) is None


def test_a_key_that_keeps_back_its_groups_is_distrusted_and_an_honest_one_is_not():
    ledger = DrawLedger(window=256, share=0.25)
    for c in [1, 0, 3, 2, *range(4, 1000)]:  # honest, a little out of order
        ledger.observe("honest", (0, c, 1))
    assert not ledger.distrusted("honest") and ledger.missing("honest")[0] == 0
    sent = 0
    for c in range(0, 400, 4):  # a selective liar: one group in four sent
        ledger.observe("liar", (0, c, 1))
        sent += 1
        if ledger.distrusted("liar"):
            break
    assert sent <= 6, sent
    for c in range(0, 300):  # a restart (stream 1) does not wipe the slate at once
        ledger.observe("restarts", (0, c, 1) if c < 20 else (c // 20, 0, 1))
    assert ledger.distrusted("restarts")
    two = DrawLedger(window=256, share=0.25, learners=2)  # each of two learners sees half of a key's counters
    for c in range(0, 600, 2):
        two.observe("split", (0, c, 1))
    assert not two.distrusted("split") and two.missing("split")[0] <= GAP_SLACK


def seeded_loop(cfg, parts) -> LearnerLoop:
    task, tokenizer, engine = parts
    model = load_model(cfg.model, cfg.task, "cpu")
    model.load_state_dict(engine.model.state_dict())
    loop = LearnerLoop(model, tokenizer, task, cfg, ReplayBuffer.from_config(cfg), publish=lambda *a: None)
    loop.publish_current()
    return loop


def test_a_live_loop_replays_checked_groups_and_catches_the_marker_liar(cfg, parts, honest):
    task, tokenizer, engine = parts
    who, groups = honest
    loop = seeded_loop(cfg, parts)
    for g in groups[:4]:
        assert loop.buffer.add(g) == "ok"
    loop.step()
    assert loop.rejected["draw_mismatch"] == 0 and loop.verifier.counts["checked"] == 4  # probation: all checked
    liar = Identity.generate()
    marker = tokenizer.encode("ZZZZ", add_special_tokens=False)
    for g in groups[4:8]:
        assert loop.buffer.add(marker_liar(copy_of(g, liar), liar, engine, marker)) == "ok"
    diag = loop.step()
    assert loop.rejected["seed_prompt"] >= 3  # re-signed under its own key, its seeds name other prompts
    loop2 = seeded_loop(cfg, parts)
    own: list = []
    SamplerLoop(
        engine, task, cfg.sampler, cfg.run_id, liar, own.append, seed=5, seeded=cfg.trust.seeded_groups
    ).step()  # its own seeds, then its text chosen
    for g in own:
        loop2.buffer.add(marker_liar(g, liar, engine, marker))
    diag = loop2.step()
    assert loop2.rejected["draw_mismatch"] >= 1 and diag is not None and diag["groups"] == 0.0, diag


def test_typicality_flags_chosen_text_from_the_training_forward(cfg, parts):
    task, tokenizer, _ = parts
    engine = build_engine(cfg)
    with torch.no_grad():  # a confident policy (the untrained tiny model is near uniform: any text is typical)
        engine.model.get_output_embeddings().weight.mul_(12.0)
    who, groups = Identity.generate(), []
    sampler = SamplerLoop(
        engine, task, cfg.sampler, cfg.run_id, who, groups.append, seed=4, seeded=cfg.trust.seeded_groups
    )
    for _ in range(4):
        sampler.step()
    marker = tokenizer.encode("ZZZZ", add_special_tokens=False)
    watch = TypicalityWatch(cfg.trust.typicality_z)

    class R:  # a row as the loop keeps it
        def __init__(self, group):
            self.group = group

    for lied in (False, True):
        for g in groups:
            g = marker_liar(g, who, engine, marker) if lied else g
            with torch.no_grad():
                scores = completion_scores(
                    engine.model, [g.prompt_tokens] * len(g.completions), g.completions, 1.0, 0, variance=True
                )
            watch.add([R(g)] * len(g.completions), scores.logp, scores.entropy, scores.variance, scores.mask)
        flagged = watch.flagged_now()
        assert len(flagged) == (len(groups) if lied else 0), flagged


class _VLLMLike:
    replayable = False


def test_an_engine_that_cannot_replay_says_so_or_refuses_to_start(cfg):
    said: list[str] = []
    vllm = cfg.model_copy(update={"sampler": cfg.sampler.model_copy(update={"engine": "vllm"})})
    with pytest.raises(UsageError, match="accept_unreplayed"):
        unreplayed_line(vllm, _VLLMLike(), said.append)
    accepting = vllm.model_copy(update={"trust": vllm.trust.model_copy(update={"accept_unreplayed": True})})
    unreplayed_line(accepting, _VLLMLike(), said.append)
    assert len(said) == 1 and "unreplayed" in said[0]
