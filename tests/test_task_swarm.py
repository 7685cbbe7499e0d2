"""A reasoning-gym composite with a TRL reward file in a real local swarm (bootstrap, learner and sampler
processes on 127.0.0.1): the sampler's prompts are the learner's (no unknown prompt, no prompt-token mismatch),
its reward hints equal the learner's recomputed rewards, and the learner trains."""

from __future__ import annotations

import pytest
from restart_helpers import WORK, start_learner_and_sampler, steps, wait_rows
from swarm_helpers import LocalSwarm
from task_files import SHORTER, write_rewards

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes


@pytest.mark.slow  # CI's long-scenario step runs it (.ci/run)
def test_a_reasoning_gym_task_with_a_reward_file_trains_in_a_swarm(tmp_path):
    rewards = write_rewards(tmp_path / "rewards.py", SHORTER)
    sets = [
        "task.name=reasoning_gym",
        "task.args.datasets=[basic_arithmetic,base_conversion,propositional_logic]",
        "task.args.format_reward=0.5",
        f"task.reward_funcs=[task,{rewards}:tagged]",
        "task.eval_size=8",
        "model.tiny.warm_start_steps=0",
        "learner.prompts_per_step=2",
    ]
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    with LocalSwarm(tmp_path, extra_sets=sets) as swarm:
        assert WORK[-1] == "model.tiny.warm_start_steps=20"  # the swarm's own sets come after and win
        start_learner_and_sampler(swarm, tmp_path)
        rows = wait_rows(steps_file, lambda r: len(r) >= 4, 240, "4 learner steps")
        status = swarm.status()
    rows = steps(steps_file)
    last = rows[-1]
    for reason in ("unknown_prompt", "prompt_mismatch", "reward_hint_mismatch", "eval_prompt"):
        assert last.get(f"rejected_{reason}", 0) == 0, last
    assert not any(k.startswith("rejected_reward_") for k in last), last
    assert {p.get("role") for p in status["peers"]} >= {"learner", "sampler"}
