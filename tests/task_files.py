"""Files the task tests write: a reward file as TRL's docs write one (and a shorter one), a conversational JSONL
dataset, a reward package installed by entry point, and a minimal verifiers environment."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

TRL_REWARDS = textwrap.dedent(
    '''
    """Reward functions written for TRL's GRPOTrainer, unchanged."""
    import asyncio
    import re


    def format_reward(completions, **kwargs):
        pattern = r"^<answer>.*?</answer>$"
        contents = [completion[0]["content"] for completion in completions]
        return [1.0 if re.match(pattern, c) else 0.0 for c in contents]


    def accuracy_reward(completions, solution, **kwargs):
        contents = [completion[0]["content"] for completion in completions]
        return [1.0 if sol in c else 0.0 for c, sol in zip(contents, solution)]


    async def brevity_reward(prompts, completions, **kwargs):
        await asyncio.sleep(0)
        return [-len(completion[0]["content"]) / 100 for completion in completions]


    def only_for_math(completions, kind, **kwargs):
        return [2.0 if k == "math" else None for k in kind]
    '''
)

# a shorter reward file: a tag reward and a length penalty (the reasoning-gym tests)
SHORTER = """
def text(c):
    return c[0]["content"] if isinstance(c, list) else c


def tagged(completions, **kwargs):
    return [1.0 if "<answer>" in text(c) else -len(text(c)) / 10 for c in completions]
"""

BAD_REWARDS = textwrap.dedent(
    '''
    """One reward function per way of failing; `mode` in the environment file picks which (or none)."""
    import math
    import time


    def flaky(completions, **kwargs):
        n = len(completions)
        first = completions[0] if isinstance(completions[0], str) else completions[0][0]["content"]
        pick = sum(map(ord, first)) % 5
        if pick == 0:
            raise RuntimeError("boom")
        if pick == 1:
            time.sleep(3)
        if pick == 2:
            return [0.5] * (n + 1)
        if pick == 3:
            return [math.nan] * n
        return [0.5] * n
    '''
)


def write_rewards(path: Path, text: str = TRL_REWARDS) -> Path:
    path.write_text(text)
    return path


def write_conversational_jsonl(path: Path, n: int = 24) -> Path:
    rows = [
        {
            "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
            "solution": str(2 * i),
            "kind": "math" if i % 2 else "chat",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_task_package(root: Path, name: str = "my_task_pkg", version: str = "1.2.3") -> Path:
    """A task package 'installed' under `root` (add it to sys.path): a module and its dist-info with an entry point."""
    (root / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from swarmnode.tasks.arithmetic import ArithmeticTask


            class EvenTask(ArithmeticTask):
                name = "even_sums"


            def make(cfg):
                return EvenTask(max_operand=cfg.max_operand, seed=cfg.seed, eval_size=cfg.eval_size)
            """
        )
    )
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[swarmnode.tasks]\neven_sums = {name}:make\n")
    (info / "top_level.txt").write_text(f"{name}\n")
    (info / "RECORD").write_text(f"{name}.py,,\n")
    return root


VERIFIERS_ENV = textwrap.dedent(
    """
    import verifiers as vf
    from datasets import Dataset


    def load_environment(n: int = 16, multi_turn: bool = False, **kwargs):
        data = Dataset.from_list([{"question": f"Say {i}.", "answer": str(i)} for i in range(n)])
        parser = vf.XMLParser(["answer"], answer_field="answer")

        def correct(completion, answer, **kw):
            return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

        rubric = vf.Rubric(funcs=[correct, parser.get_format_reward_func()], weights=[1.0, 0.2], parser=parser)
        if multi_turn:
            return vf.ToolEnv(dataset=data, tools=[], rubric=rubric, max_turns=3)
        return vf.SingleTurnEnv(dataset=data, system_prompt="Answer in <answer> tags.", parser=parser, rubric=rubric)
    """
)
