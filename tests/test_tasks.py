"""Tasks: determinism, held-out eval prompts, prompt ids, arithmetic partial credit, math-verify rewards."""

from __future__ import annotations

import json
import random
import threading

import pytest

from swarmnode.config import TaskConfig
from swarmnode.tasks import ArithmeticTask, TaskError, arithmetic_reward, build_task, math_verify_reward


def test_arithmetic_is_deterministic_given_seed():
    a, b = build_task(TaskConfig(seed=3)), build_task(TaskConfig(seed=3))
    assert a.sample(20, random.Random(7)) == b.sample(20, random.Random(7))
    assert a.eval_prompts() == b.eval_prompts()
    assert build_task(TaskConfig(seed=4)).eval_prompts() != a.eval_prompts()


def test_arithmetic_eval_is_held_out_and_ids_resolve():
    task = build_task(TaskConfig(max_operand=9))
    eval_ids = {p.prompt_id for p in task.eval_prompts()}
    assert 3 <= len(eval_ids) <= 30
    train = task.sample(2000, random.Random(0))
    assert not eval_ids & {p.prompt_id for p in train}
    for p in train[:50] + task.eval_prompts():
        assert task.get(p.prompt_id) == p
        a, b = map(int, p.prompt_id.split(":")[1:])
        assert p.text == f"{a}+{b}=" and p.reference == str(a + b)


def test_arithmetic_large_operands_eval_size():
    task = ArithmeticTask(max_operand=10**6, seed=1, eval_size=40)
    assert len(task.eval_prompts()) == 40


@pytest.mark.parametrize("bad", ["", "add:1", "add:1:2:3", "add:-1:2", "add:10:1", "mul:1:2", "add:1:2 ", None, 5])
def test_arithmetic_get_rejects_bad_ids(bad):
    assert build_task(TaskConfig(max_operand=9)).get(bad) is None


def test_arithmetic_reward_partial_credit():
    assert arithmetic_reward("8", "8") == 1.0
    assert arithmetic_reward(" 8\n", "8") == 1.0
    near, far = arithmetic_reward("7", "8"), arithmetic_reward("80", "8")
    assert 0.1 <= far < near < 1.0
    assert arithmetic_reward("8x", "8") < near
    assert 0 < arithmetic_reward("8x", "8") <= 0.1
    assert arithmetic_reward("x8", "8") == 0.0
    assert arithmetic_reward("", "8") == 0.0
    assert arithmetic_reward("9" * 500, "8") == 0.05  # the leading-number credit caps the digits it reads


def test_random_policy_scores_low_but_nonzero():
    task = build_task(TaskConfig())
    rng = random.Random(0)
    alphabet = [chr(c) for c in range(33, 127)] + [" "]
    prompts = task.sample(500, rng)
    rewards = [task.reward(p, "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))) for p in prompts]
    mean = sum(rewards) / len(rewards)
    assert 0 < mean < 0.05
    assert all(0.0 <= r <= 1.0 for r in rewards)


@pytest.fixture
def jsonl(tmp_path):
    rows = [
        {"question": "What is 1/2 + 1/4?", "solution": "\\frac{3}{4}"},
        {"question": "Solve 2x = 6.", "solution": "3"},
        {"question": "Expand (x+1)^2.", "solution": "x^2+2x+1"},
        {"question": "sqrt(16)?", "solution": "4"},
        {"question": "Pi to 2 places?", "solution": "3.14"},
        {"question": "10 choose 2?", "solution": "45"},
    ]
    path = tmp_path / "math.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


def _math_task(path, **kw):
    return build_task(TaskConfig(name="math", path=str(path), prompt_field="question", answer_field="solution", **kw))


def test_math_jsonl_task_and_ids(jsonl):
    task = _math_task(jsonl)
    train = task.sample(50, random.Random(0))
    assert {p.reference for p in train} <= {"\\frac{3}{4}", "3", "x^2+2x+1", "4", "3.14", "45"}
    for p in train + task.eval_prompts():
        assert task.get(p.prompt_id) == p
        assert "\\boxed{}" in p.text
    assert not {p.prompt_id for p in task.eval_prompts()} & {p.prompt_id for p in train}
    assert task.get("math:0:000000000000") is None
    assert task.get("math:99:" + train[0].prompt_id.split(":")[2]) is None


@pytest.mark.parametrize(
    "completion,reference,expected",
    [
        ("So the sum is \\boxed{\\frac{3}{4}}.", "\\frac{3}{4}", 1.0),
        ("The answer is \\boxed{0.75}", "\\frac{3}{4}", 1.0),
        ("\\boxed{x^2 + 2x + 1}", "x^2+2x+1", 1.0),
        ("\\boxed{(x+1)^2}", "x^2+2x+1", 1.0),
        ("\\boxed{45}", "45", 1.0),
        ("\\boxed{44}", "45", 0.0),  # wrong
        ("\\boxed{\\frac{2}{3}}", "\\frac{3}{4}", 0.0),
        ("I don't know", "45", 0.0),  # unparsable
        ("\\boxed{", "45", 0.0),
        ("", "45", 0.0),
        ("\\boxed{" + "(" * 20000 + "}", "45", 0.0),  # adversarial: huge nesting
        ("\\boxed{9^{9^{9^{9}}}}", "45", 0.0),  # adversarial: power tower
        ("\\boxed{2^{99999999}}", "45", 0.0),
        ("\\boxed{123456789!}", "45", 0.0),
        ("x" * 1_000_000 + "\\boxed{45}", "45", 1.0),  # huge prefix: only the tail is read
    ],
)
def test_math_verify_reward(completion, reference, expected):
    assert math_verify_reward(completion, reference) == expected


def test_math_verify_reward_off_main_thread():
    results = []
    worker = threading.Thread(
        target=lambda: results.extend(
            [math_verify_reward("\\boxed{45}", "45"), math_verify_reward("\\boxed{9^9^9}", "45")]
        )
    )
    worker.start()
    worker.join(timeout=60)
    assert results == [1.0, 0.0]


def test_math_task_errors(tmp_path, jsonl):
    with pytest.raises(TaskError, match="no field 'problem'"):
        build_task(TaskConfig(name="math", path=str(jsonl)))
    with pytest.raises(TaskError, match="cannot read"):
        build_task(TaskConfig(name="math", path=str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "1+1", "answer": "2"}\nnot json\n')
    with pytest.raises(TaskError, match="bad.jsonl:2: not valid JSON"):
        build_task(TaskConfig(name="math", path=str(bad)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(TaskError, match="no problems"):
        build_task(TaskConfig(name="math", path=str(empty)))


def test_math_dataset_without_datasets_package_is_clear():
    try:
        import datasets  # noqa: F401

        pytest.skip("the datasets package is installed here")
    except ImportError:
        pass
    with pytest.raises(TaskError, match="pip install datasets"):
        build_task(TaskConfig(name="math", dataset="some/dataset"))
