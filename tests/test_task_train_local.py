"""`train-local` trains on each task path with the tiny model (a few steps): reasoning_gym with a TRL reward file, a
conversational dataset with TRL rewards, a verifiers environment (where the package's 0.1 API is installed), and
a reward function that raises, hangs, answers the wrong length or NaN: counted per kind, the run goes on. Then two
nodes built from one run card alone agree on every prompt id and reward."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from task_files import BAD_REWARDS, SHORTER, VERIFIERS_ENV, write_conversational_jsonl, write_rewards

from swarmnode.config import build_config, load_config_data
from swarmnode.identity import Identity
from swarmnode.local.trainer import LocalTrainer
from swarmnode.node.host import next_card
from swarmnode.node.invite import config_from_card
from swarmnode.protocol.run_card import RunCard
from swarmnode.tasks import build_task

pytestmark = pytest.mark.slow
RG = {"datasets": {"basic_arithmetic": {"weight": 2}, "base_conversion": {}}, "size": 5000}
TINY = {
    "model": {"tiny": {"warm_start_steps": 0}},
    "learner": {"prompts_per_step": 2},
    "sampler": {"prompts_per_batch": 2},
}


def tiny_cfg(task: dict, **more):
    data = load_config_data("tiny-cpu", [])
    for key, value in {**TINY, **more, "task": task}.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return build_config(data)


def train(cfg, steps: int = 2) -> LocalTrainer:
    trainer = LocalTrainer(cfg, progress=None)
    summary = trainer.run(steps, max_seconds=120)
    assert summary["learner_steps"] == steps, summary
    return trainer


def test_reasoning_gym_with_a_trl_reward_file_trains(tmp_path):
    rewards = write_rewards(tmp_path / "rewards.py", SHORTER)
    train(
        tiny_cfg(
            {
                "name": "reasoning_gym",
                "args": {**RG, "format_reward": 0.5},
                "reward_funcs": ["task", f"{rewards}:tagged"],
                "eval_size": 4,
            }
        )
    )


def test_a_conversational_dataset_with_trl_rewards_trains(tmp_path):
    rewards = write_rewards(tmp_path / "rewards.py")
    task = {
        "name": "dataset",
        "path": str(write_conversational_jsonl(tmp_path / "train.jsonl")),
        "args": {"answer_column": "solution"},
        "system_prompt": "Be brief.",
        "reward_funcs": [f"{rewards}:accuracy_reward", f"{rewards}:brevity_reward", f"{rewards}:only_for_math"],
        "eval_size": 4,
    }
    train(tiny_cfg(task))


def test_failing_reward_functions_are_counted_and_the_run_goes_on(tmp_path):
    bad = write_rewards(tmp_path / "bad.py", BAD_REWARDS)
    cfg = tiny_cfg({"name": "arithmetic", "reward_funcs": ["task", f"{bad}:flaky"], "reward_timeout": 0.3})
    trainer = train(cfg, steps=3)
    kinds = {k for k in trainer.learner.rejected if k.startswith("reward_flaky_")}
    assert kinds >= {
        "reward_flaky_raised",
        "reward_flaky_timeout",
        "reward_flaky_wrong_length",
        "reward_flaky_non_finite",
    }, trainer.learner.rejected
    assert all(f"rejected_{k}" in trainer.learner._status() for k in kinds)  # what status and metrics read


VF_OK = importlib.util.find_spec("verifiers") is not None and hasattr(__import__("verifiers"), "SingleTurnEnv")


@pytest.mark.skipif(not VF_OK, reason="verifiers (0.1 API, pip install 'swarmnode[verifiers]') is not installed here")
def test_a_single_turn_verifiers_environment_trains_and_a_multi_turn_one_is_refused(tmp_path, monkeypatch):
    (tmp_path / "vf_echo_env.py").write_text(VERIFIERS_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    shorter = write_rewards(tmp_path / "rewards.py", SHORTER)  # the rubric's own rewards, plus a graded one
    train(
        tiny_cfg({"name": "verifiers", "args": {"env": "vf_echo_env"}, "reward_funcs": ["task", f"{shorter}:tagged"]})
    )
    from swarmnode.tasks import TaskError

    with pytest.raises(TaskError, match="single-turn environments"):
        build_task(
            tiny_cfg({"name": "verifiers", "args": {"env": "vf_echo_env", "env_args": {"multi_turn": True}}}).task
        )


NODE = """
import json, random, sys
from swarmnode.node.invite import config_from_card
from swarmnode.protocol.run_card import RunCard
from swarmnode.tasks import build_task
card = RunCard.from_file(open(sys.argv[1]).read())
task = build_task(config_from_card(card, {}).task)
drawn = task.sample(16, random.Random(5)) + task.eval_prompts()
print(json.dumps([[p.prompt_id, p.text, task.score(p, ["<answer>" + p.reference + "</answer>", "x"]).rewards] for p in drawn]))
"""


@pytest.mark.usefixtures("starts_processes")
def test_two_nodes_derive_the_same_prompt_ids_and_rewards_from_the_card_alone(tmp_path):
    rewards = write_rewards(tmp_path / "rewards.py", SHORTER)
    cfg = tiny_cfg(
        {
            "name": "reasoning_gym",
            "args": {**RG, "format_reward": 0.5},
            "reward_funcs": ["task", f"{rewards}:tagged"],
            "seed": 11,
            "eval_size": 4,
        }
    )
    owner = Identity.generate()
    card = next_card(cfg, owner, ["/ip4/127.0.0.1/tcp/9/p2p/" + owner.peer_id], None).signed(owner)
    path = tmp_path / "card.json"
    path.write_text(card.to_file())
    other = subprocess.run(
        [sys.executable, "-c", NODE, str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert other.returncode == 0, other.stderr[-2000:]
    task = build_task(config_from_card(RunCard.from_file(path.read_text()), {}).task)
    drawn = task.sample(16, random.Random(5)) + task.eval_prompts()
    mine = [[p.prompt_id, p.text, task.score(p, ["<answer>" + p.reference + "</answer>", "x"]).rewards] for p in drawn]
    assert json.loads(other.stdout) == mine and len({m[0] for m in mine}) > 10
    assert all(m[2][0] >= 2.5 for m in mine)  # the scorer, the format reward and the file's reward all agree
    assert Path(rewards).exists()


def test_two_sapo_nodes_train_on_each_others_reasoning_gym_text(tmp_path):
    from swarmnode.node.sapo.policy import SapoPolicy

    rewards = write_rewards(tmp_path / "rewards.py", SHORTER)
    sapo = {"local_groups": 2, "external_groups": 2, "max_groups_per_peer": 2}
    task = {"name": "reasoning_gym", "args": RG, "reward_funcs": ["task", f"{rewards}:tagged"], "eval_size": 4}
    a, b = (SapoPolicy(tiny_cfg(task, mode="sapo", sapo=sapo), Identity.generate(), seed=s) for s in (0, 1))
    for _ in range(2):
        made = {a: a.generate(), b: b.generate()}
        for group in made[a]:
            b.receive(group)
        for group in made[b]:
            a.receive(group)
        for policy in (a, b):
            diag = policy.train_step()
            assert diag is not None and diag["external_groups"] == 2, policy.counters()
    assert not a.counters()["rejected"] and not a.counters()["reward_lies"], a.counters()
