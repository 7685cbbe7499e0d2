"""The built-in long-completion task: reward, parsing of prompt ids, disjoint train / validation / eval splits,
the warm start's per-token label noise, and its wiring into the config and the task registry."""

from __future__ import annotations

import random

import pytest

from swarmnode.config import ConfigError, TaskConfig, load_config
from swarmnode.tasks import build_task
from swarmnode.tasks.digitmap import DigitMapTask, digitmap_reward, mapped


def test_reference_maps_each_digit_plus_one_mod_ten():
    assert mapped("0123456789") == "1234567890"
    task = DigitMapTask(digits=5, eval_size=4)
    prompt = task.sample(1, random.Random(0))[0]
    digits = prompt.text[:-1]
    assert prompt.text.endswith("=") and len(digits) == 5 and prompt.reference == mapped(digits)


def test_reward_is_the_fraction_of_right_positions():
    assert digitmap_reward("1234", "1234") == 1.0
    assert digitmap_reward("1299", "1234") == 0.5
    assert digitmap_reward(" 12", "1234") == 0.5  # surrounding whitespace is ignored, missing positions are wrong
    assert digitmap_reward("123456", "1234") == 1.0  # characters past the answer are ignored
    assert digitmap_reward("", "1234") == 0.0
    assert digitmap_reward("abcd", "1234") == 0.0


def test_prompt_ids_round_trip_and_bad_ids_are_none():
    task = DigitMapTask(digits=6, eval_size=4)
    prompt = task.sample(1, random.Random(1))[0]
    assert task.get(prompt.prompt_id) == prompt
    for bad in ("dmap:12345", "dmap:1234567", "dmap:12a456", "add:1:2", "", None, 7):
        assert task.get(bad) is None


def test_splits_are_disjoint_and_sized():
    task = DigitMapTask(digits=12, eval_size=64)
    held = {p.prompt_id for p in task.eval_prompts()}
    val = {p.prompt_id for p in task.validation_prompts()}
    train = {p.prompt_id for p in task.sample(2000, random.Random(2))}
    assert len(held) == 64 and len(val) == 64
    assert not held & val and not held & train and not val & train
    assert [p.prompt_id for p in DigitMapTask(digits=12, eval_size=64).eval_prompts()] == [
        p.prompt_id for p in task.eval_prompts()
    ]  # deterministic
    assert {p.prompt_id for p in DigitMapTask(digits=12, seed=1, eval_size=64).eval_prompts()} != held


def test_short_prompts_run_out_of_held_out_strings_without_hanging():
    task = DigitMapTask(digits=2, eval_size=64)  # only 100 strings exist, about 12 of them held out
    assert 0 < len(task.eval_prompts()) < 64


def test_noisy_answer_keeps_about_the_asked_share_of_digits():
    task = DigitMapTask(digits=400, eval_size=1)
    prompt = task.sample(1, random.Random(3))[0]
    noisy = task.noisy_answer(prompt, 0.7, random.Random(4))
    assert len(noisy) == 400 and noisy.isdigit()
    assert 0.63 < digitmap_reward(noisy, prompt.reference) < 0.77  # 0.7 +- 3 standard deviations (0.023)
    assert task.noisy_answer(prompt, 1.0, random.Random(5)) == prompt.reference


def test_config_builds_the_task_and_the_long_preset_fits_the_model():
    task = build_task(TaskConfig(name="digitmap", digits=9, eval_size=8))
    assert isinstance(task, DigitMapTask) and task.digits == 9
    cfg = load_config("tiny-digitmap")
    assert cfg.task.digits + 2 <= cfg.sampler.max_completion_length
    assert cfg.task.digits + 1 <= cfg.sampler.max_prompt_length
    assert cfg.sampler.max_prompt_length + cfg.sampler.max_completion_length <= cfg.model.tiny.max_position_embeddings
    with pytest.raises(ConfigError, match="task.digits"):
        load_config("tiny-digitmap", ["task.digits=0"])
