"""Tasks: prompts, reference answers and reward functions, shared by samplers and learners.

A reward is a pure function of (prompt, completion text, reference), so a learner recomputes it from the
decoded text instead of trusting the sampler. Every prompt has a `prompt_id` from which any node holding the
same task configuration recovers the prompt (`Task.get`).

Modules:
- `base`           `Prompt`, the `Task` interface, `TaskError`, the seeded-hash held-out split
- `arithmetic`     built in: "a+b=" with partial credit
- `digitmap`       built in: map each digit through a fixed permutation (a longer-completion task)
- `word_problems`  built in: generated arithmetic word problems for small instruct models
- `math_problems`  JSONL or HF `datasets` problems scored by math-verify
- `registry`       `build_task`: the task a configuration names
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
