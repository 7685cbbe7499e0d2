"""Tasks: prompts, reference answers and reward functions, shared by samplers and learners.

A reward is a pure function of (prompt, completion text, reference), so a learner recomputes it from the
decoded text instead of trusting the sampler. Every prompt has a `prompt_id` from which any node holding the
same task configuration recovers the prompt (`Task.get`).

Tasks are plugins (entry-point group `swarmnode.tasks`; docs/tasks.md), rewards TRL-style functions.

Modules:
- `base`           `Prompt`, `Scored`, the `Task` interface, `TaskError`, the seeded-hash held-out split
- `registry`       `build_task`: the task a configuration names, through the entry points (built-ins too)
- `builtin`        the factories of the built-in tasks
- `arithmetic`     built in: "a+b=" with partial credit
- `digitmap`       built in: map each digit through a fixed permutation (a longer-completion task)
- `word_problems`  built in: generated arithmetic word problems for small instruct models
- `math_problems`  JSONL or HF `datasets` problems scored by math-verify
- `dataset_task`   `dataset`: any JSON/JSONL/Parquet/CSV file or hub dataset, columns to rewards
- `reasoning_gym_task`  `reasoning_gym`: reasoning-gym's generators and scorers, answer tags
- `verifiers_task` `verifiers`: a single-turn verifiers environment (optional extra)
- `args`           `task.args` checked per task
- `chat`           conversations (system prompt, messages, chat-template arguments) inside a prompt's text
- `reward_func`, `rewards`  TRL-style reward functions named in the config
- `reward_runner`  running them with a time limit, failures counted per function
- `configured`     a task with the config's system prompt and reward functions laid over it
- `pins`           what the run card pins of a task: package versions, reward-module digests
"""

from swarmnode.tasks.arithmetic import ArithmeticTask, arithmetic_reward
from swarmnode.tasks.base import EVAL_EVERY, Prompt, Task, TaskError
from swarmnode.tasks.math_problems import MathTask, load_dataset_rows, load_jsonl_rows, math_verify_reward
from swarmnode.tasks.registry import build_task

__all__ = [
    "EVAL_EVERY",
    "ArithmeticTask",
    "MathTask",
    "Prompt",
    "Task",
    "TaskError",
    "arithmetic_reward",
    "build_task",
    "load_dataset_rows",
    "load_jsonl_rows",
    "math_verify_reward",
]
