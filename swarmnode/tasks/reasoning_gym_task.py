"""The `reasoning_gym` task: procedurally generated verifiable problems from reasoning-gym's datasets.

`task.args.datasets` names one or several reasoning-gym datasets, each with a weight and its own settings (its
`CompositeDataset`), e.g. `{basic_arithmetic: {weight: 2}, base_conversion: {config: {max_base: 16}}}` or a plain
list of names. Item `i` is reasoning-gym's item `i` of that composite for seed `task.seed` (sub-datasets in name
order, so a card's sorted JSON builds the same one): a pure function of (run seed, index), so every node derives
every prompt from the card alone. The prompt id is `rg:<index>:<digest of question and answer>`. One index in
`EVAL_EVERY` (seeded hash) is held out; `eval_prompts` are the first `task.eval_size` of those.

The answer format is rl-swarm's: the system prompt asks for the final answer in `<answer>...</answer>` tags
(reasoning-gym's own "default" prompt); the reward is reasoning-gym's scorer of that dataset on the tagged
answer (`score_answer`), plus `task.args.format_reward` x 1.0 for a completion with exactly one answer block.
Reward functions get the columns `answer`, `metadata` and `source_dataset`.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from importlib import metadata
from typing import Any

from pydantic import Field

from swarmnode.config import TaskConfig
from swarmnode.errors import ExitCode, missing_package
from swarmnode.tasks.args import TaskArgs, parse_args
from swarmnode.tasks.base import Prompt, Task, TaskError, hash_held_out
from swarmnode.tasks.reward_func import TASK_REWARD, RewardFunc

ITEM_CACHE = 8192
_ANSWER_BLOCK = re.compile(r"<answer>.*?</answer>", re.DOTALL)


class DatasetArgs(TaskArgs):
    """One dataset of the composite."""

    weight: float = Field(default=1.0, gt=0)
    config: dict[str, Any] = Field(default_factory=dict)


class ReasoningGymArgs(TaskArgs):
    """`task.args` of the reasoning_gym task."""

    datasets: dict[str, DatasetArgs] | list[str] = Field(min_length=1)
    size: int = Field(1_000_000, ge=16, le=10**9, description="item indices drawn from [0, size)")
    system_prompt: str = Field("default", description="a key of reasoning_gym.utils.SYSTEM_PROMPTS")
    format_reward: float = Field(0.0, ge=0, description="weight of the answer-tag format reward")


def format_reward(prompts: list, completions: list, **_: Any) -> list[float]:
    """1.0 for a completion with exactly one `<answer>...</answer>` block, else 0.0 (TRL's signature)."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if len(_ANSWER_BLOCK.findall(t)) == 1 else 0.0 for t in texts]


class ReasoningGymTask(Task):
    """A reasoning-gym composite (see the module docstring)."""

    name = "reasoning_gym"

    def __init__(self, args: ReasoningGymArgs, seed: int, eval_size: int):
        import reasoning_gym
        from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec
        from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

        self.args, self.seed, self._extract = args, seed, extract_answer
        specs = args.datasets if isinstance(args.datasets, dict) else {n: DatasetArgs() for n in args.datasets}
        known = set(reasoning_gym.factory.DATASETS)
        for name in specs:
            if name not in known:
                raise TaskError(
                    f"task.args.datasets.{name}: no such reasoning-gym dataset (e.g. "
                    f"{', '.join(sorted(known)[:8])}, ...; reasoning_gym.factory.DATASETS lists all)",
                    exit_code=ExitCode.USAGE,
                )
        if args.system_prompt not in SYSTEM_PROMPTS:
            raise TaskError(
                f"task.args.system_prompt {args.system_prompt!r}: not one of {', '.join(SYSTEM_PROMPTS)}",
                exit_code=ExitCode.USAGE,
            )
        self.default_system_prompt = SYSTEM_PROMPTS[args.system_prompt]
        self.scores_groups = True
        config = CompositeConfig(
            size=args.size,
            seed=seed,
            datasets=[DatasetSpec(n, specs[n].weight, dict(specs[n].config)) for n in sorted(specs)],
        )
        try:
            self.data = CompositeDataset(config)
        except Exception as exc:  # reasoning-gym checks each dataset's settings with asserts and ValueErrors
            raise TaskError(
                f"task.args.datasets: reasoning-gym refused the settings ({exc!r})", exit_code=ExitCode.USAGE
            ) from None
        self._item = functools.lru_cache(ITEM_CACHE)(self._make_item)
        self._eval = self._held_out_indices(eval_size)

    def _make_item(self, index: int) -> tuple[dict, str]:
        entry = self.data[index]
        digest = hashlib.sha256(f"{entry['question']}\0{entry['answer']}".encode()).hexdigest()[:12]
        return entry, f"rg:{index}:{digest}"

    def _held_out_indices(self, n: int) -> list[int]:
        return [i for i in range(min(self.args.size, 64 * max(n, 1))) if hash_held_out(self.seed, str(i))][:n]

    def _prompt(self, index: int) -> Prompt:
        entry, prompt_id = self._item(index)
        columns = {"metadata": entry["metadata"], "source_dataset": entry["metadata"].get("source_dataset")}
        return Prompt(prompt_id, entry["question"], str(entry["answer"]), {**columns, "answer": entry["answer"]})

    def sample(self, n: int, rng: random.Random) -> list[Prompt]:
        out: list[Prompt] = []
        while len(out) < n:
            index = rng.randrange(self.args.size)
            if not hash_held_out(self.seed, str(index)):
                out.append(self._prompt(index))
        return out

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(i) for i in self._eval]

    def get(self, prompt_id: str) -> Prompt | None:
        match = re.fullmatch(r"rg:(\d{1,10}):[0-9a-f]{12}", prompt_id) if isinstance(prompt_id, str) else None
        if not match or int(match.group(1)) >= self.args.size:
            return None
        prompt = self._prompt(int(match.group(1)))
        return prompt if prompt.prompt_id == prompt_id else None

    def held_out(self, prompt: Prompt) -> bool:
        return hash_held_out(self.seed, prompt.prompt_id.split(":")[1])

    def reward(self, prompt: Prompt, completion_text: str) -> float:
        entry, _ = self._item(int(prompt.prompt_id.split(":")[1]))
        return float(self.data.score_answer(self._extract(completion_text), entry))

    def reward_funcs(self) -> tuple[list[RewardFunc], list[float]]:
        own = RewardFunc(TASK_REWARD, "reasoning_gym", lambda p, texts: [self.reward(p, t) for t in texts], trl=False)
        if not self.args.format_reward:
            return [own], [1.0]
        return [own, RewardFunc(TASK_REWARD, "format", format_reward)], [1.0, self.args.format_reward]

    def packages(self) -> dict[str, str]:
        return {"reasoning-gym": metadata.version("reasoning-gym")}


def make(cfg: TaskConfig) -> Task:
    """The reasoning_gym task of a config."""
    args = parse_args(ReasoningGymArgs, cfg.args, cfg.name)
    try:
        import reasoning_gym  # noqa: F401
    except ImportError:
        raise missing_package("reasoning-gym", "task.name=reasoning_gym", "reasoning-gym") from None
    return ReasoningGymTask(args, cfg.seed, cfg.eval_size)
