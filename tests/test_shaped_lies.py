"""Lies shaped to pass a two-statistic check (issue #47) are caught on their first checked group, and what one step
spends and lets through is budgeted per key (the real tiny model, task, spot checker, buffer and learner loop):
- the cancelling liar (+-2 nats on 48 % of the tokens) and the generated family (`shaped_lies.family()`: +-0.5
  nats on 10-50 % of the tokens, on the largest-advantage completions, on the long ones) are refused by the
  check, through the learner loop, on the first group it checks, while honest fp32 and bf16-like claims pass;
- a wave of 100 new keys costs each step at most its probation budget of checks, and every newcomer leaves
  probation within 100 x probation_checks / budget steps;
- a key at the floor of its check rate passes at most its unchecked budget into any step, whatever it bursts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from learner_helpers import FAST, copy_of, signal_groups
from shaped_lies import family, lie
from verify_helpers import CLEAN, bf16_logprobs, checked_loop

from swarmnode.config import TrustConfig, load_config
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.check_budget import StepChecks, draw_step, suspect_budget, unchecked_budget
from swarmnode.learner.mismatch import group_mismatch
from swarmnode.learner.verify import SpotChecker
from swarmnode.model.logprobs import completion_scores
from swarmnode.model.models import load_tokenizer
from swarmnode.sampler.build import build_engine
from swarmnode.tasks import build_task

torch.set_num_threads(1)
TOLERANCE = TrustConfig().verify_tolerance


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST + ["trust.verify_fraction=0.05", "sampler.max_completion_length=8"])


@pytest.fixture(scope="module")
def parts(cfg):
    return build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)


@pytest.fixture(scope="module")
def groups(cfg, parts):
    return signal_groups(cfg, parts, 6)


def _padded(rows: list[list[float]], n: int) -> torch.Tensor:
    return torch.tensor([list(r) + [0.0] * (n - len(r)) for r in rows], dtype=torch.float32)


def test_every_shaped_lie_fails_the_check_and_honest_claims_pass(groups, parts):
    _, tokenizer, engine = parts
    for g in groups:
        with torch.no_grad():
            scores = completion_scores(
                engine.model,
                [g.prompt_tokens] * len(g.completions),
                g.completions,
                g.temperature,
                tokenizer.pad_token_id,
            )
        n = scores.logp.shape[1]
        assert group_mismatch(scores.logp, _padded(g.logprobs, n), scores.mask, TOLERANCE).passed
        for whole, scale in ((False, 1.0), (False, 8.0), (True, 1.0)):  # honest bf16-like claims
            claimed, ref = bf16_logprobs(
                engine.model,
                g.prompt_tokens,
                g.completions,
                g.temperature,
                tokenizer.pad_token_id,
                whole_forward=whole,
                logit_scale=scale,
            )
            m = group_mismatch(_padded(ref, n), _padded(claimed, n), scores.mask, TOLERANCE)
            assert m.passed, (whole, scale, m)
        for kind in family():
            told = lie(kind, g.logprobs, g.rewards)
            assert all(x <= 0 for lp in told for x in lp)  # what the wire format admits
            assert sum(map(sum, told)) != sum(map(sum, g.logprobs)) or kind != "advantage_down"
            m = group_mismatch(scores.logp, _padded(told, n), scores.mask, TOLERANCE)
            assert not m.passed, (kind, m)


def test_each_shaped_liar_is_caught_on_its_first_checked_group_by_the_learner(cfg, parts, groups):
    loop = checked_loop(cfg, parts)  # holds the weights the groups were sampled with, as version 0
    honest = Identity.generate()
    for g in groups[:2]:
        assert loop._verified(copy_of(g, honest))  # on probation: checked, clean
    assert loop.verifier.scores[honest.peer_id] < 1e-4
    caught: list[tuple[str, str]] = []
    loop.hooks.on_poisoned = lambda g, reason: caught.append((g.sampler_id, reason))
    for i, kind in enumerate(["cancelling"] + family()):
        liar = Identity.generate()  # a new key each: its first group is checked (probation)
        g = groups[i % len(groups)]
        assert not loop._verified(copy_of(g, liar, logprobs=lie(kind, g.logprobs, g.rewards, seed=i))), kind
        assert caught[-1][0] == liar.peer_id and caught[-1][1].startswith("logprob_mismatch")
        assert loop.verifier.kl[liar.peer_id] > 100 * loop.verifier.kl[honest.peer_id]
    assert loop.rejected["logprob_mismatch"] == len(family()) + 1


@dataclass
class _G:
    """A buffered group as the budgets see it (id, key, claimed version, lineage)."""

    group_id: str
    sampler_id: str
    policy_version: int = 0
    lineage: str = ""


def _steps(checker: SpotChecker, buffer: ReplayBuffer, trust: TrustConfig, per_step: int):
    """One step's draw under the budgets: (groups, StepChecks), the draw decisions judged clean."""
    checks = StepChecks(
        checker, unchecked_budget(trust.unchecked_share, per_step), suspect_budget(trust.probation_share, per_step)
    )
    drawn = draw_step(buffer, checks, per_step)
    for g in drawn:
        if checks.drawn(g):
            checker.judge(g.sampler_id, CLEAN)
    return drawn, checks


def test_a_wave_of_new_keys_costs_each_step_a_bounded_number_of_checks_and_all_leave_probation():
    trust = TrustConfig()
    per_step, newcomers = 8, 100
    budget = suspect_budget(trust.probation_share, per_step)
    assert budget == 2
    checker = SpotChecker(trust, window=17)
    for _ in range(10_000):
        checker.judge("old", CLEAN)  # an established sampler, checked at the floor rate
    buffer = ReplayBuffer(capacity=100_000, max_staleness=10**6, per_sampler_quota=1.0)
    keys = [f"new{i}" for i in range(newcomers)]
    serial = 0
    bound = math.ceil(newcomers * trust.probation_checks / budget)
    for step in range(bound + 1):  # noqa: B007 (read after the loop)
        held = buffer.stats()["per_sampler"]
        for key in keys + ["old"] * per_step:  # each newcomer keeps 2 groups waiting, the old one a step's worth
            if held.get(key, 0) < 2 or key == "old":
                serial += 1
                held[key] = held.get(key, 0) + 1
                assert buffer.add(_G(f"g{serial}", key)) == "ok"
        drawn, checks = _steps(checker, buffer, trust, per_step)
        assert checks.suspect_checks <= budget
        assert len(drawn) == per_step  # the established sampler's groups fill the step
        if not any(checker.suspect(k) for k in keys):
            break
    else:
        raise AssertionError("a newcomer is still on probation after the bound")
    assert step + 1 <= bound
    print(f"{newcomers} newcomers out of probation after {step + 1} steps (bound {bound})")


def test_a_trusted_key_passes_at_most_its_unchecked_budget_into_any_step():
    trust = TrustConfig()
    per_step = 8
    budget = unchecked_budget(trust.unchecked_share, per_step)
    checker = SpotChecker(trust, window=17)
    for key in ("patient", "honest"):
        for _ in range(10_000):
            checker.judge(key, CLEAN)
    assert checker.rate("patient") == trust.verify_fraction  # the floor
    buffer = ReplayBuffer(capacity=100_000, max_staleness=10**6, per_sampler_quota=1.0)
    serial = 0
    for _step in range(50):
        for key in ["patient"] * 32 + ["honest"] * 4:  # a burst from the patient key every step
            serial += 1
            buffer.add(_G(f"g{serial}", key))
        drawn, checks = _steps(checker, buffer, trust, per_step)
        assert len(drawn) == per_step
        unchecked = [g for g in drawn if g.sampler_id == "patient" and not checks.drawn(g)]
        assert len(unchecked) <= budget
    # alone in the buffer, its over-budget groups still fill the step, and are checked
    alone = ReplayBuffer(capacity=100, max_staleness=10)
    for i in range(per_step):
        alone.add(_G(f"a{i}", "patient"))
    drawn, checks = _steps(checker, alone, trust, per_step)
    assert len(drawn) == per_step and checks.counts["forced_checks"] >= per_step - budget


def test_the_learner_loop_fills_a_step_of_newcomers_alone_and_checks_them_all(cfg, parts, groups):
    """The probation budget bounds checks while other work can fill a step; with newcomers alone in the buffer the
    step is not left short: the over-budget newcomers are taken, and every one of them is checked."""
    loop = checked_loop(cfg, parts)
    per_step = cfg.learner.prompts_per_step
    assert suspect_budget(cfg.trust.probation_share, per_step) == 1
    keys = [Identity.generate() for _ in range(per_step)]
    for g, key in zip(groups[:per_step], keys):  # new keys, all on probation
        assert loop.buffer.add(copy_of(g, key)) == "ok"
    diag = loop.step()
    assert diag is not None and loop.verifier.counts["checked"] == per_step
    # the step row says how many of its groups each key sent (what a patient liar weighs in a step)
    assert diag["sampler_ids"] == sorted(k.peer_id for k in keys) and diag["sampler_groups"] == [1] * per_step
    assert len(loop.buffer) == 0 and diag["checks_deferred_probation"] == per_step - 1


def test_status_names_a_sampler_whose_kl_stands_out_from_the_others():
    from swarmnode.observe.health import find_alerts

    learner = {
        "peer_id": "L" * 20,
        "role": "learner",
        "version": 3,
        "health": {
            "verified_peers": ["liar-key", "honest-a", "honest-b", "honest-c"],
            "verified_kl": [1.3, 0.0009, 0.0011, 0.0],
        },
    }
    alerts = [a for a in find_alerts([learner], 16) if a["kind"] == "sampler_kl"]
    assert [a["peer_id"] for a in alerts] == ["liar-key"] and "KL" in alerts[0]["message"]
    learner["health"]["verified_kl"] = [0.002, 0.0009, 0.0011, 0.0]  # bf16-like spread: nobody named
    assert not [a for a in find_alerts([learner], 16) if a["kind"] == "sampler_kl"]
