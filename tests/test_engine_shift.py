"""One sampler whose engine shifts its behaviour log-probs on a few sequences (a fixed -0.3 nats per token on two
completions of each group, as a different engine's numerics would): with TRL's sequence-level masked correction on,
the learner's masked share rises on the steps holding that sampler's groups, stays 0 on honest steps, reaches the
health record (status, dashboard, metrics), and training goes on (the real tiny model, task and learner loop)."""

from __future__ import annotations

import torch
from learner_helpers import cfg, copy_of, make_loop, parts, signal_groups  # noqa: F401  (fixtures: cfg, parts)

from swarmnode.identity import Identity
from swarmnode.observe.health import record_health

SHIFT = 0.3  # nats per token, on two completions of each group


def test_an_engine_shift_is_masked_and_training_goes_on(cfg, parts):
    c = cfg.model_copy(
        update={
            "learner": cfg.learner.model_copy(
                update=dict(
                    vllm_importance_sampling_correction=True,
                    vllm_importance_sampling_clip_min=0.5,
                    vllm_importance_sampling_clip_max=2.0,
                )
            ),
            "trust": cfg.trust.model_copy(update=dict(verify_fraction=0.0)),  # the shift is not a lie to catch
        }
    )
    loop = make_loop(c, parts)
    honest = signal_groups(c, parts, 8)
    engine = Identity.generate()
    shifted = [
        copy_of(g, engine, logprobs=[[x - SHIFT for x in lq] if i < 2 else lq for i, lq in enumerate(g.logprobs)])
        for g in honest[4:]
    ]
    for g in shifted + honest[:4]:  # newest first: the honest groups make the first step
        loop.buffer.add(g)
    before = [p.detach().clone() for p in loop.model.parameters()]
    first, second = loop.step(), loop.step()
    assert first is not None and second is not None and first["trained"] == second["trained"] == 1.0
    assert first["masked_fraction"] == 0.0
    assert 0 < second["masked_fraction"] <= 0.5  # at most the two shifted completions of each group
    assert second["importance_sampling_ratio_max"] <= 2.0  # what is left is inside the bounds
    assert loop.step_count == 2 and any(not torch.equal(a, b) for a, b in zip(before, loop.model.parameters()))
    assert record_health({"masked_frac": second["masked_fraction"]})["masked_frac"] == second["masked_fraction"]
