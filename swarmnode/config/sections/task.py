"""The `task` section: the task plugin, its data and its reward functions."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from swarmnode.config.sections.base import Section


class TaskConfig(Section):
    """Prompts and rewards. A task is a plugin (entry-point group `swarmnode.tasks`, docs/tasks.md): built in are
    `arithmetic`, `digitmap`, `word_problems`, `math` (JSONL or an HF `datasets` name), `dataset` (any local
    JSON/JSONL/Parquet/CSV file or hub dataset), `reasoning_gym` and `verifiers`."""

    name: str = Field(
        "arithmetic", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="the task: any registered task (docs/tasks.md)"
    )
    args: dict[str, Any] = Field(default_factory=dict, description="the task's own settings, checked by the task")
    reward_funcs: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="TRL-style reward functions (module:function or file.py:function; `task` = the task's own "
        "reward); empty: the task's own reward",
    )
    reward_weights: list[float] | None = Field(
        None, description="one weight per reward function (TRL's reward_weights); default all 1.0"
    )
    reward_timeout: float = Field(30.0, gt=0, le=3600, description="seconds a reward function may take per group")
    system_prompt: str | None = Field(None, description="a system message before every prompt (chat models)")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="extra arguments of the chat template (e.g. enable_thinking: false)"
    )
    seed: int = Field(0, description="seed of the task's prompts and of prompt order")
    max_operand: int = Field(9, ge=1, le=10**6, description="arithmetic and word_problems: largest operand")
    digits: int = Field(128, ge=1, le=4096, description="digitmap: digits per prompt (= completion tokens - 1)")
    path: str | None = Field(None, description="JSONL file for the math task")
    dataset: str | None = Field(None, description="HF datasets name for the math task")
    split: str = Field("train", description="dataset split")
    prompt_field: str = Field("problem", description="math: the prompt's field")
    answer_field: str = Field("answer", description="math: the reference answer's field")
    prompt_template: str = Field(
        "{prompt}\nPut the final answer in \\boxed{{}}.\n", description="math: how a problem becomes a prompt"
    )
    eval_size: int = Field(64, ge=0, description="prompts held out for evaluation")

    @model_validator(mode="after")
    def _weights_match(self) -> TaskConfig:
        if self.reward_weights is not None and len(self.reward_weights) != max(1, len(self.reward_funcs)):
            raise ValueError(
                f"task.reward_weights has {len(self.reward_weights)} weights for "
                f"{max(1, len(self.reward_funcs))} reward functions (one each, in task.reward_funcs order)"
            )
        return self
