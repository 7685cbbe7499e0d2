"""Tasks as plugins: the entry-point registry, `task.args` checked by each task, TRL reward functions with their
failures counted, the reasoning_gym and dataset tasks, conversational prompts, and the run card's task pins."""

from __future__ import annotations

import importlib
import math
import random
import sys
import time

import pytest
from task_files import write_conversational_jsonl, write_rewards, write_task_package

from swarmnode.config import TaskConfig, build_config
from swarmnode.errors import ExitCode
from swarmnode.identity import Identity
from swarmnode.model.sources import source_digests
from swarmnode.node.host import next_card
from swarmnode.node.invite import SourceMismatch, check_sources
from swarmnode.tasks import Prompt, TaskError, build_task
from swarmnode.tasks.chat import chat_parts
from swarmnode.tasks.pins import pin_needs
from swarmnode.tasks.registry import BUILTIN, registered
from swarmnode.tasks.reward_func import RewardFunc
from swarmnode.tasks.reward_runner import RewardRunner

RG = {"datasets": {"basic_arithmetic": {"weight": 2}, "base_conversion": {}}, "size": 5000}


def test_every_builtin_task_is_registered_and_an_unknown_name_lists_them():
    assert set(BUILTIN) <= set(registered())
    with pytest.raises(TaskError) as err:
        build_task(TaskConfig(name="no_such_task"))
    assert err.value.exit_code == ExitCode.USAGE
    assert (
        "'no_such_task'" in str(err.value) and "reasoning_gym" in str(err.value) and "swarmnode.tasks" in str(err.value)
    )


def test_a_package_adds_a_task_through_its_entry_point_and_the_card_pins_its_version(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(write_task_package(tmp_path)))
    importlib.invalidate_caches()
    assert registered()["even_sums"].dist == "my_task_pkg"
    task = build_task(TaskConfig(name="even_sums", eval_size=4))
    assert type(task).__name__ == "EvenTask" and len(task.eval_prompts()) == 4
    cfg = build_config({"task": {"name": "even_sums"}, "model": {"tiny": {"warm_start_steps": 0}}})
    assert source_digests(cfg.model, cfg.task)["package:my_task_pkg"] == "1.2.3"
    sys.modules.pop("my_task_pkg", None)


@pytest.mark.parametrize(
    "name, args, needle",
    [
        ("arithmetic", {"max": 3}, "task.args.max: unknown key"),
        ("reasoning_gym", {}, "task.args.datasets"),
        ("reasoning_gym", {"datasets": ["no_such_set"]}, "task.args.datasets.no_such_set"),
        ("reasoning_gym", {"datasets": ["bf"], "format_reward": -1}, "task.args.format_reward"),
        ("dataset", {"prompt_colum": "q"}, "task.args.prompt_colum: unknown key"),
    ],
)
def test_task_args_are_checked_by_the_task_naming_the_key(name, args, needle):
    with pytest.raises(TaskError) as err:
        build_task(TaskConfig(name=name, args=args, path="x.jsonl"))
    assert needle in str(err.value) and err.value.exit_code == ExitCode.USAGE


def test_a_trl_reward_file_is_used_unchanged_on_a_conversational_dataset(tmp_path):
    rewards = write_rewards(tmp_path / "rewards.py")
    cfg = TaskConfig(
        name="dataset",
        path=str(write_conversational_jsonl(tmp_path / "train.jsonl")),
        args={"answer_column": "solution"},
        system_prompt="Answer in <answer> tags.",
        chat_template_kwargs={"enable_thinking": False},
        reward_funcs=[
            f"{rewards}:{f}" for f in ("format_reward", "accuracy_reward", "brevity_reward", "only_for_math")
        ],
        reward_weights=[0.5, 1.0, 1.0, 1.0],
        eval_size=4,
    )
    task = build_task(cfg)
    prompt = next(p for p in task.sample(24, random.Random(0)) if p.columns["kind"] == "math")
    messages, kwargs = chat_parts(prompt.text)
    assert messages[0] == {"role": "system", "content": "Answer in <answer> tags."} and kwargs == {
        "enable_thinking": False
    }
    good, bad = f"<answer>{prompt.reference}</answer>", "no idea"
    rewards_of = task.score(prompt, [good, bad]).rewards
    assert rewards_of == pytest.approx([0.5 + 1.0 - len(good) / 100 + 2.0, -len(bad) / 100 + 2.0])
    chat = next(p for p in task.sample(24, random.Random(0)) if p.columns["kind"] == "chat")
    assert task.score(chat, [bad]).rewards == pytest.approx([-len(bad) / 100])  # None: not applicable
    assert task.get(prompt.prompt_id) == prompt and not task.held_out(prompt)


def _runner(timeout: float = 0.5) -> RewardRunner:
    def ok(prompts, completions, **kw):
        return [1.0] * len(completions)

    def raises(prompts, completions, **kw):
        raise ValueError("bad")

    def hangs(prompts, completions, **kw):
        time.sleep(30)

    def short(prompts, completions, **kw):
        return [1.0]

    def nan(prompts, completions, **kw):
        return [math.inf, math.nan][: len(completions)]

    def text(prompts, completions, **kw):
        return ["1"] * len(completions)

    funcs = [RewardFunc(f.__name__, f.__name__, f) for f in (ok, raises, hangs, short, nan, text)]
    return RewardRunner(funcs, None, timeout)


def test_each_bad_reward_behaviour_fails_the_group_and_is_counted_per_function():
    runner = _runner()
    prompt = Prompt("p:0", "2+2=", "4")
    scored = runner.score(prompt, ["4", "5"])
    assert scored.rewards is None
    assert set(scored.failures) == {
        "raises_raised",
        "hangs_timeout",
        "short_wrong_length",
        "nan_non_finite",
        "text_non_finite",
    }
    runner.score(prompt, ["4", "5"])
    assert runner.failures["hangs_timeout"] == 2 and runner.failures["raises_raised"] == 2
    assert "ok" not in "".join(runner.failures)
    alone = RewardRunner([runner.funcs[0]], [3.0], 0.5)  # the good function alone, weighted
    assert alone.score(prompt, ["4", "5"]).rewards == [3.0, 3.0]


def test_a_hung_function_is_not_called_again_while_its_calls_hang():
    runner = RewardRunner([_runner().funcs[2]], None, 0.05)
    prompt = Prompt("p:0", "2+2=", "4")
    for _ in range(6):
        assert runner.score(prompt, ["4"]).failures == ("hangs_timeout",)
    assert len(runner._stuck["hangs"]) == 4 and runner.failures["hangs_timeout"] == 6


def test_reasoning_gym_items_are_a_pure_function_of_seed_and_index_scored_by_reasoning_gym():
    a = build_task(TaskConfig(name="reasoning_gym", args=RG, seed=3, eval_size=8, system_prompt=""))
    reordered = {"datasets": dict(reversed(list(RG["datasets"].items()))), "size": 5000}  # a card's sorted JSON
    b = build_task(TaskConfig(name="reasoning_gym", args=reordered, seed=3, eval_size=8, system_prompt=""))
    drawn = a.sample(16, random.Random(1))
    assert [p.prompt_id for p in drawn] == [p.prompt_id for p in b.sample(16, random.Random(1))]
    assert [b.get(p.prompt_id) for p in drawn] == drawn and not any(a.held_out(p) for p in drawn)
    evals = a.eval_prompts()
    assert len(evals) == 8 and all(a.held_out(p) for p in evals)
    assert {p.columns["source_dataset"] for p in drawn} == {"basic_arithmetic", "base_conversion"}
    p = drawn[0]
    assert a.score(p, [f"thinking... <answer>{p.reference}</answer>", "<answer>nope</answer>"]).rewards == [1.0, 0.0]
    other_seed = build_task(TaskConfig(name="reasoning_gym", args=RG, seed=4, eval_size=8, system_prompt=""))
    assert other_seed.get(p.prompt_id) is None or other_seed.get(p.prompt_id).text != p.text


def test_reasoning_gym_asks_for_answer_tags_and_adds_the_format_reward():
    task = build_task(TaskConfig(name="reasoning_gym", args={**RG, "format_reward": 0.5}, eval_size=2))
    p = task.sample(1, random.Random(0))[0]
    assert "<answer>" in chat_parts(p.text)[0][0]["content"]  # reasoning-gym's own system prompt
    assert task.score(p, [f"<answer>{p.reference}</answer>", "<answer>x</answer>", "x"]).rewards == [1.5, 0.5, 0.0]


def test_the_card_pins_the_task_packages_and_reward_digests_and_refuses_a_node_that_differs(tmp_path):
    rewards = write_rewards(tmp_path / "rewards.py")
    data = {
        "task": {"name": "reasoning_gym", "args": RG, "reward_funcs": ["task", f"{rewards}:format_reward"]},
        "model": {"tiny": {"warm_start_steps": 0}},
    }
    cfg = build_config(data)
    card = next_card(cfg, Identity.generate(), [], None)
    pins = {k: v for k, v in card.sources.items() if ":" in k}
    assert set(pins) == {"package:reasoning-gym", f"reward:{rewards}:format_reward"}
    check_sources(cfg, card)  # the same machine: accepted
    assert any("reasoning-gym==" in n for n in pin_needs(card.sources))
    card.sources["package:reasoning-gym"] = "0.0.1"
    with pytest.raises(SourceMismatch) as err:
        check_sources(cfg, card)
    line = str(err.value)
    assert "task package reasoning-gym" in line and "run 0.0.1" in line and "pip install 'reasoning-gym==0.0.1'" in line
    card.sources["package:reasoning-gym"] = pins["package:reasoning-gym"]
    rewards.write_text(rewards.read_text() + "\n# edited\n")
    with pytest.raises(SourceMismatch) as err:
        check_sources(cfg, card)
    digest = pins[f"reward:{rewards}:format_reward"]
    assert "reward module" in str(err.value) and digest[:12] in str(err.value)


SAPO_NINE = {
    "arc_1d",
    "basic_arithmetic",
    "base_conversion",
    "bf",
    "binary_matrix",
    "calendar_arithmetic",
    "decimal_arithmetic",
    "fraction_simplification",
    "propositional_logic",
}  # rl-swarm's, the SAPO paper's


@pytest.mark.parametrize("preset", ["smollm2-135m-rgym-sapo", "qwen3-0.6b-rgym-lora"])
def test_the_reasoning_gym_presets_train_the_nine_sapo_datasets(preset):
    from swarmnode.config import load_config

    cfg = load_config(preset, ["task.eval_size=4"])
    assert set(cfg.task.args["datasets"]) == SAPO_NINE
    drawn = build_task(cfg.task).sample(64, random.Random(0))
    assert len({p.columns["source_dataset"] for p in drawn}) >= 7
    if preset.endswith("-lora"):
        assert cfg.learner.lora.enabled and cfg.task.chat_template_kwargs == {"enable_thinking": False}
    else:
        assert cfg.mode == "sapo" and (cfg.sapo.local_groups, cfg.sapo.external_groups) == (4, 4)
