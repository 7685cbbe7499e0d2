"""Liars against a run of seeded groups (`trust.seeded_groups`), as hostile peers run them: each has its own key,
the run's model at version 0 (the run under test publishes no other) and a real p2pd in the caller's process, and
pushes groups a learner acknowledges like an honest sampler's:
- `chosen`: its own seeded groups (its seeds' prompts, honest draws) with half of each group's completions
  replaced by a marker text, their log-probs honestly recomputed with the claimed weights;
- `selective`: honest seeded groups, but only one counter in `KEEP` is sent (the samples it likes);
- `prompt`: its own seeds' draws on a prompt it chose instead of the seed's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from pathlib import Path

import torch
from group_helpers import copy_of
from hivemind.p2p import PeerID
from liar_peer import _start, push_one

from swarmnode.config import NodeConfig
from swarmnode.identity import Identity
from swarmnode.model.draws import group_seed
from swarmnode.model.logprobs import completion_scores
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.tasks import build_task

KEEP = 8  # the selective liar sends one counter in KEEP
MARKER = "ZZZZ"


def liar_groups(cfg: NodeConfig, kind: str, who: Identity, lineage: str, n: int) -> list[RolloutGroup]:
    """`n` groups of liar `kind` (module docstring), signed by `who`."""
    engine, task = build_engine(cfg), build_task(cfg.task)
    out: list[RolloutGroup] = []
    loop = SamplerLoop(
        engine, task, cfg.sampler, cfg.run_id, who, out.append, lineage=lineage, seed=11, seeded=cfg.trust.seeded_groups
    )
    if kind == "selective":
        for i in range(n):
            loop.counter = KEEP * i  # the counters in between were made and kept back
            loop.step(1)
        return out
    while len(out) < n:
        loop.step()
    out = out[:n]
    pad = engine.tokenizer.pad_token_id
    if kind == "chosen":
        marker = engine.tokenizer.encode(MARKER, add_special_tokens=False)
        lied = []
        for g in out:
            comps = [marker if j % 2 else c for j, c in enumerate(g.completions)]
            with torch.no_grad():
                scores = completion_scores(engine.model, [g.prompt_tokens] * len(comps), comps, g.temperature, pad)
            lps = [scores.logp[j, : len(c)].tolist() for j, c in enumerate(comps)]
            lied.append(copy_of(g, who, completions=comps, logprobs=lps))
        return lied
    chosen = task.sample(1, __import__("random").Random(5))[0]  # the one prompt it answers
    lied = []
    for g in out:
        seed = group_seed(g.run_id, who.peer_id, *g.draw[:2])
        gen = engine.generate(
            [chosen.text], len(g.completions), g.temperature, cfg.sampler.max_completion_length, [seed]
        )
        rewards = task.score(chosen, gen[0].texts).rewards or [0.0] * len(gen[0].texts)
        lied.append(
            copy_of(
                g,
                who,
                prompt_id=chosen.prompt_id,
                prompt_tokens=gen[0].prompt_tokens,
                completions=gen[0].completions,
                logprobs=gen[0].logprobs,
                rewards=rewards,
            )
        )
    return lied


async def push_all(tmp: Path, learner: str, run_id: str, who: Identity, groups: list[RolloutGroup]) -> Counter[str]:
    """Push `groups` one by one to `learner` ("<addr>/p2p/<peer id>"), resending on "full"; the acks' statuses."""
    p2p = await _start(tmp, who, learner)
    target, statuses = PeerID.from_base58(learner.rpartition("/p2p/")[2]), Counter()
    try:
        for group in groups:
            for _ in range(400):  # "full" is backpressure: resent 50 ms later, as an honest sender does
                ack = await push_one(p2p, target, run_id, group.encode())
                if ack.get("status") != "full":
                    break
                await asyncio.sleep(0.05)
            statuses[ack.get("status", "none")] += 1
            await asyncio.sleep(0.05)
    finally:
        with contextlib.suppress(Exception):
            await p2p.shutdown()
    return statuses
