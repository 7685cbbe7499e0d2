"""Spot checks that no claimed version escapes (the real tiny model, task and learner loop): a sampler that claims
an old version is checked against that version's kept weights, swapped into the live model and back (under LoRA
the adapters only, never a copy of the model); new keys are on probation; a caught liar's buffered groups are
dropped; the median statistic passes honest bf16-like log-probs and catches a +0.3 nats liar."""

from __future__ import annotations

import copy

import pytest
import torch
from learner_helpers import FAST, copy_of, sampled_groups
from verify_helpers import CLEAN, bf16_logprobs, checked_loop

from swarmnode.config import TrustConfig, load_config
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.learner.mismatch import Mismatch
from swarmnode.learner.verify import SpotChecker, group_mismatch
from swarmnode.model.models import load_tokenizer
from swarmnode.sampler.build import build_engine
from swarmnode.tasks import build_task

torch.set_num_threads(1)
SHIFT = 0.3  # nats per token: the liar of issue #40


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST + ["learner.learning_rate=1e-2", "trust.verify_fraction=0.05"])


@pytest.fixture(scope="module")
def parts(cfg):
    return build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)


def train_versions(loop: LearnerLoop, groups, n: int) -> None:
    """`n` optimiser steps, each published as a new version."""
    rows = [r for g in groups if (r := loop.rows.rows(g, loop.version)) and len({x.reward for x in r}) > 1]
    assert len(rows) >= 2, "the untrained tiny model should give some groups a reward signal"
    for i in range(n):
        loop._optimise(rows[(2 * i) % len(rows) :][:2])
        loop.step_count += 1
        loop._bump_version()


def shifted(group, who: Identity, shift: float = SHIFT):
    return copy_of(group, who, logprobs=[[x + shift for x in lp] for lp in group.logprobs])


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_liar_claiming_an_old_version_is_caught_and_its_buffered_groups_dropped(cfg, parts, lora, monkeypatch):
    loop = checked_loop(cfg, parts, lora)
    old = sampled_groups(cfg, parts, n_batches=3, version=0)  # honest version-0 groups
    train_versions(loop, old, 6)
    assert loop.version == 6 and 0 in loop.verifier.kept  # version 0 = version - 6 is still kept
    real_deepcopy = copy.deepcopy

    def no_model_copies(obj, *args, **kwargs):
        assert not isinstance(obj, torch.nn.Module), "a spot check copied the model"
        return real_deepcopy(obj, *args, **kwargs)

    monkeypatch.setattr(copy, "deepcopy", no_model_copies)
    live = weights(loop.model)
    honest_sampler = Identity.generate()
    tokenizer = parts[1]
    for g in old[:3]:  # an honest sampler on probation: every group is checked, all pass
        assert loop.verifier.decide(honest_sampler.peer_id, 0, loop.version, loop._weights_published) == "check"
        assert loop.verifier.mismatch(loop.model, g, tokenizer.pad_token_id, loop.precision.autocast).mean_abs < 1e-3
    assert all(torch.equal(live[k], v) for k, v in loop.model.state_dict().items()), "the live weights came back"

    liar = Identity.generate()
    lies = [shifted(g, liar) for g in old[:6]]
    caught: list[str] = []
    loop.hooks.on_poisoned = lambda g, reason: caught.append(g.sampler_id)
    for g in lies:
        assert loop.buffer.add(g) == "ok"
    assert not loop._verified(lies[0])  # probation: the first group is checked against version 0's weights
    assert caught == [liar.peer_id] and loop.rejected["logprob_mismatch"] == 1
    assert len(loop.buffer) == 0 and loop.rejected["liar_buffered"] == 6  # its other lies went with it
    assert loop.verifier.rate(liar.peer_id) == 1.0  # and every later group of it is checked
    assert all(torch.equal(live[k], v) for k, v in loop.model.state_dict().items())


LIE = Mismatch(10, SHIFT, SHIFT, SHIFT, 0, SHIFT, 0.05, "median")


def test_probation_then_a_falling_rate_and_a_catch_is_remembered():
    checker = SpotChecker(TrustConfig(verify_fraction=0.05, probation_checks=8), window=17)
    key = "sampler"
    assert checker.rate(key) == 1.0
    for _ in range(8):
        assert checker.judge(key, CLEAN)
    assert checker.rate(key) == 1.0
    for _ in range(8):
        checker.judge(key, CLEAN)
    assert checker.rate(key) == 0.5
    for _ in range(200):
        checker.judge(key, CLEAN)
    assert checker.rate(key) == 0.05
    assert not checker.judge(key, LIE)
    for _ in range(100):
        checker.judge(key, CLEAN)
    assert checker.rate(key) == 1.0  # a key once caught never earns a lower rate
    # a claim whose weights are not kept is refused when drawn, not trusted
    assert checker.decide("new", 3, current=5, exact_weights=True) == "uncheckable"
    assert checker.decide("new", 5, current=5, exact_weights=True) == "check"


def test_the_window_narrows_the_staleness_bound_when_versions_do_not_fit():
    assert SpotChecker(TrustConfig(verify_keep_bytes=17 << 20), window=17).checkable_staleness(1 << 20) is None
    checker = SpotChecker(TrustConfig(verify_keep_bytes=10 << 20), window=17)
    assert checker.checkable_staleness(2 << 20) == 4 and checker.window == 5
    buffer = ReplayBuffer(capacity=8, max_staleness=16)
    buffer.narrow_staleness(4, "test")
    assert buffer.max_staleness == 4


def test_the_median_passes_honest_bf16_logprobs_and_catches_a_shifted_liar(cfg, parts):
    task, tokenizer, engine = parts
    model = engine.model
    groups = sampled_groups(cfg, parts, n_batches=4)
    honest, liars = [], []
    for g in groups:
        for whole, scale in ((False, 1.0), (False, 8.0), (True, 1.0)):
            claimed, ref = bf16_logprobs(
                model,
                g.prompt_tokens,
                g.completions,
                g.temperature,
                tokenizer.pad_token_id,
                whole_forward=whole,
                logit_scale=scale,
            )
            honest.append(_median(claimed, ref))
            liars.append(_median([[x + SHIFT for x in lp] for lp in claimed], ref))
    tolerance = TrustConfig().verify_tolerance
    assert max(honest) <= tolerance, f"an honest bf16-like group failed: {max(honest):.3f}"
    assert min(liars) > tolerance


def _median(claimed: list[list[float]], ref: list[list[float]]) -> float:
    n = max(len(x) for x in ref)
    pad = lambda rows: torch.tensor([r + [0.0] * (n - len(r)) for r in rows])  # noqa: E731
    mask = torch.tensor([[i < len(r) for i in range(n)] for r in ref])
    return group_mismatch(pad(ref), pad(claimed), mask, TrustConfig().verify_tolerance).median_abs
