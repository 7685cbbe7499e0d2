"""The ack's `s` at both ends, without the network: the learner's record of prompts whose groups came back
all-solved or all-failed (`learner.fill.SaturatedPrompts`: what each sampler has not been told yet, 'open' once a
prompt shows signal again) and the sampler's redraws of them over the real arithmetic task
(`sampler.prompt_skip.SkippedPrompts`). The swarm path is tests/test_learner_signals_swarm.py."""

from __future__ import annotations

import random
from types import SimpleNamespace

from swarmnode.learner.fill import TOLD_PEERS, SaturatedPrompts
from swarmnode.learner.rows import Row
from swarmnode.sampler.prompt_skip import KEEP_SHARE, SkippedPrompts
from swarmnode.tasks import ArithmeticTask


def group(prompt_id: str, rewards: list[float]) -> list[Row]:
    g = SimpleNamespace(prompt_id=prompt_id, prompt_tokens=[1], temperature=1.0)
    return [Row(g, [1], [0.0], r, 0) for r in rewards]


def test_each_sampler_is_told_each_saturated_prompt_once_and_open_when_it_shows_signal_again():
    record = SaturatedPrompts()
    record.note(group("add:1:1", [1.0] * 4))
    record.note(group("add:2:2", [0.0] * 4))
    record.note(group("add:3:3", [0.0, 1.0, 0.0, 0.0]))  # signal: nothing to tell
    assert record.news_for("a") == {"add:1:1": "solved", "add:2:2": "failed"}
    assert record.news_for("a") == {}  # told already
    record.note(group("add:2:2", [1.0, 0.0, 0.0, 0.0]))  # the policy moved: signal again
    record.note(group("add:3:3", [0.4, 0.1, 0.0, 0.0]))  # never saturated: still nothing to tell
    assert record.news_for("a") == {"add:2:2": "open"}
    assert record.news_for("b") == {"add:1:1": "solved", "add:2:2": "open"}  # a newcomer gets the state
    assert record.snapshot() == {"add:1:1": "solved"}
    for i in range(TOLD_PEERS):  # a flood of throwaway keys: the oldest marks are forgotten, not kept
        record.news_for(f"stranger{i}")
    assert len(record.told) == TOLD_PEERS and "a" not in record.told
    assert record.news_for("a") == {"add:1:1": "solved", "add:2:2": "open"}  # told afresh, as a newcomer


def test_a_sampler_draws_prompts_it_was_told_saturated_far_less_often_until_told_open():
    task, rng = ArithmeticTask(max_operand=9, seed=0, eval_size=64), random.Random(0)
    training = sorted({p.prompt_id for p in task.sample(4000, random.Random(1))})
    told = set(training[::2])  # half the training prompts came back saturated
    skip = SkippedPrompts()
    skip.update({p: "solved" for p in told} | {"add:99:99": "weird", 3: "solved"})  # junk is ignored
    assert set(skip.told) == told
    draws = [p.prompt_id for _ in range(1000) for p in skip.sample(task, 4, rng)]
    share = sum(p in told for p in draws) / len(draws)
    assert KEEP_SHARE / 2 < share < 0.2, share  # 0.5 without the skip; still drawn now and then
    assert skip.redrawn > len(draws) * 0.3  # the draws replaced, counted (the health's prompts_redrawn)
    skip.update({p: "open" for p in told})
    assert skip.told == {}
    draws = [p.prompt_id for _ in range(1000) for p in skip.sample(task, 4, rng)]
    assert 0.4 < sum(p in told for p in draws) / len(draws) < 0.6
