"""One group cannot poison a learner's step: absurd behaviour log-probs cost only their own group, held-out
evaluation prompts are never trained on (the real tiny model, task and learner loop)."""

from __future__ import annotations

import pytest
import torch
from learner_helpers import cfg, copy_of, parts, signal_groups  # noqa: F401  (fixtures: the tiny-cpu config, task, tokenizer, engine)

from swarmnode.config import LEVEL_OF_ALGORITHM
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.hooks import LearnerHooks
from swarmnode.learner.loop import LearnerLoop
from swarmnode.model.models import load_model

torch.set_num_threads(1)


def make_loop(cfg, parts, publish=None, hooks: LearnerHooks | None = None) -> LearnerLoop:
    task, tokenizer, _ = parts
    return LearnerLoop(
        load_model(cfg.model, cfg.task, "cpu"),
        tokenizer,
        task,
        cfg,
        ReplayBuffer.from_config(cfg),
        publish,
        hooks=hooks,
    )


@pytest.mark.parametrize("algorithm", ["gepo", "grpo"])
def test_absurd_logprobs_cost_only_their_group(cfg, parts, algorithm):
    level = LEVEL_OF_ALGORITHM[algorithm]
    c = cfg.model_copy(
        update={
            "learner": cfg.learner.model_copy(update={"importance_sampling_level": level}),
            "trust": cfg.trust.model_copy(update={"verify_fraction": 0.0}),
        }
    )  # no spot check
    reported: list[str] = []
    loop = make_loop(c, parts, hooks=LearnerHooks(on_poisoned=lambda g, reason: reported.append(g.sampler_id)))
    honest = signal_groups(c, parts, 4)
    attacker = Identity.generate()
    poisoned = copy_of(honest[0], attacker, logprobs=[[-1e30] * len(x) for x in honest[0].completions])
    for g in honest[1:] + [poisoned]:  # one step draws all four (newest first)
        assert loop.buffer.add(g) == "ok"
    before = {k: v.clone() for k, v in loop.model.state_dict().items()}
    diag = loop.step()
    assert diag is not None and diag["trained"] == 1.0 and loop.step_count == 1
    assert loop.rejected["poisoned_group"] == 1 and reported == [attacker.peer_id]
    assert loop.rejected["nonfinite_grad_steps"] == 0
    after = loop.model.state_dict()
    assert all(torch.isfinite(v).all() for v in after.values())
    assert any(not torch.equal(before[k], after[k]) for k in before), "the honest groups trained"
    assert all(x == x for x in (diag["loss"], diag["grad_norm"]))  # finite diagnostics, no NaN


def test_held_out_eval_prompts_are_refused(cfg, parts):
    task, tokenizer, _ = parts
    loop = make_loop(cfg, parts)
    honest = signal_groups(cfg, parts, 1)[0]
    held = task.eval_prompts()[0]
    tokens = tokenizer(held.text, add_special_tokens=True)["input_ids"]
    leaked = copy_of(honest, Identity.generate(), prompt_id=held.prompt_id, prompt_tokens=tokens)
    assert loop.rows.rows(leaked, loop.version) is None and loop.rejected["eval_prompt"] == 1
    assert loop.rows.rows(honest, loop.version) is not None


def test_spot_verification_catches_a_sampler_that_lies_about_logprobs(cfg, parts):
    c = cfg.model_copy(update={"trust": cfg.trust.model_copy(update={"verify_fraction": 1.0, "probation_share": 1.0})})
    reported: list[tuple[str, str]] = []
    loop = make_loop(
        c,
        parts,
        publish=lambda version, state: None,
        hooks=LearnerHooks(on_poisoned=lambda g, reason: reported.append((g.sampler_id, reason))),
    )
    loop.model.load_state_dict(parts[2].model.state_dict())  # the learner holds the weights that sampled them
    loop.publish_current()  # ... as its current version (nothing stepped since)
    honest = signal_groups(c, parts, 4)
    liar = Identity.generate()
    # plausible-looking values (every token "likely"): inflates importance weights, passes every format check
    lie = copy_of(honest[0], liar, logprobs=[[-0.01] * len(x) for x in honest[0].completions])
    for g in honest[1:] + [lie]:
        assert loop.buffer.add(g) == "ok"
    diag = loop.step()
    assert diag is not None and diag["groups"] == 3.0  # the lie was dropped before training
    assert loop.rejected["logprob_mismatch"] == 1 and [r[0] for r in reported] == [liar.peer_id]
    scores = loop.verifier.scores
    assert scores[liar.peer_id] > c.trust.verify_tolerance and scores[honest[1].sampler_id] < 1e-3
    assert loop.verifier.counts == {"checked": 4, "rejected": 1}
    # every version the learner published in the window is kept; the current one is its live weights
    assert loop.version == 1 and sorted(loop.verifier.kept) == [0, 1]
    stale_lie = copy_of(honest[1], liar, logprobs=[[-0.01] * len(x) for x in honest[1].completions])
    assert loop.verifier.mismatch(loop.model, stale_lie, loop.tokenizer.pad_token_id, loop.precision.autocast, 1).reason
    assert (
        loop.verifier.mismatch(loop.model, honest[1], loop.tokenizer.pad_token_id, loop.precision.autocast, 1).mean_abs
        < 1e-3
    )
