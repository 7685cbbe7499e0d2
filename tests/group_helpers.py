"""Signed rollout groups of random tokens (no model: `group(i)`, one per index) and the limits that admit them, for
the journal, buffer and disk tests; `copy_of`, a group re-signed with some fields changed (the liars' tool)."""

from __future__ import annotations

import random

from swarmnode.identity import Identity
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits

LIMITS = RolloutLimits(vocab_size=128, max_generations=8, max_completion_tokens=16, max_prompt_tokens=16)
ME = Identity.generate()


def group(i: int, version: int = 0, who: Identity = ME) -> RolloutGroup:
    rng = random.Random(i)
    comps = [[rng.randrange(128) for _ in range(4)] for _ in range(2)]
    return RolloutGroup.create(
        identity=who,
        run_id="r",
        prompt_id=f"p{i}",
        prompt_tokens=[1, 2, 3],
        completions=comps,
        logprobs=[[-0.5] * 4] * 2,
        temperature=1.0,
        rewards=[0.0, 1.0],
        policy_version=version,
        lineage="L",
    )


def copy_of(group: RolloutGroup, identity: Identity, **changes) -> RolloutGroup:
    """`group` signed by `identity`, with `changes` to its fields (its seeded draw kept unless changed)."""
    fields = dict(
        run_id=group.run_id,
        prompt_id=group.prompt_id,
        prompt_tokens=group.prompt_tokens,
        completions=group.completions,
        logprobs=group.logprobs,
        temperature=group.temperature,
        rewards=group.rewards,
        policy_version=group.policy_version,
        lineage=group.lineage,
        draw=group.draw,
    )
    return RolloutGroup.create(identity=identity, **{**fields, **changes})
