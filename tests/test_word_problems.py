"""The built-in word-problem task: generated prompts, a held-out split, ids any node resolves, and its reward
(math-verify on the final answer plus a small format term)."""

from __future__ import annotations

import random

import pytest

from swarmnode.config import TaskConfig
from swarmnode.tasks import build_task
from swarmnode.tasks.word_problems import CORRECT_WEIGHT, FORMAT_WEIGHT, WordProblemTask, word_problem_reward


@pytest.fixture(scope="module")
def task() -> WordProblemTask:
    return build_task(TaskConfig(name="word_problems", max_operand=20, eval_size=32))


def test_prompts_are_deterministic_and_resolvable(task):
    a = task.sample(50, random.Random(3))
    assert a == task.sample(50, random.Random(3))
    for prompt in a:
        assert task.get(prompt.prompt_id) == prompt
        assert prompt.text.endswith("Put the final answer in \\boxed{}.")
        assert int(prompt.reference) >= 0
    assert len({p.text for p in a}) > 40
    other = WordProblemTask(max_operand=20, seed=0, eval_size=32)
    assert [p.prompt_id for p in other.eval_prompts()] == [p.prompt_id for p in task.eval_prompts()]


def test_held_out_problems_are_never_sampled(task):
    held = {p.prompt_id for p in task.eval_prompts()}
    assert len(held) == 32
    drawn = {p.prompt_id for p in task.sample(3000, random.Random(0))}
    assert not held & drawn
    assert len(drawn) > 1000


def test_reference_is_the_problem_s_answer(task):
    prompt = task.get("wp:0:0:0:17:15")
    assert prompt.text.startswith("Mia has 17 apples. She buys 15 more.") and prompt.reference == "32"
    minus = task.get("wp:2:1:1:12:5")
    assert "Tom had 12 books and gave 5 of them" in minus.text and minus.reference == "7"


@pytest.mark.parametrize(
    "bad", ["", "wp:9:0:0:1:1", "wp:0:0:0:0:5", "wp:0:0:0:21:1", "wp:2:0:0:3:9", "add:1:2", "wp:0:0:0:1:1:1", None, 5]
)
def test_malformed_or_foreign_ids_resolve_to_none(task, bad):
    assert task.get(bad) is None


def test_reward_is_correctness_plus_format():
    assert word_problem_reward("17 + 25 = 42, so \\boxed{42}", "42") == pytest.approx(CORRECT_WEIGHT + FORMAT_WEIGHT)
    assert word_problem_reward("Mia has 42 apples now.", "42") == pytest.approx(CORRECT_WEIGHT)
    assert word_problem_reward("17 + 25 = 32. \\boxed{32}", "42") == pytest.approx(FORMAT_WEIGHT)
    assert word_problem_reward("17 + 25 = 32.", "42") == 0.0
    assert word_problem_reward("", "42") == 0.0
    assert word_problem_reward("\\boxed{x}", "42") == 0.0
