"""Running a group's reward functions: off the caller's thread, with a time limit, each failure counted.

`RewardRunner.score(prompt, texts)` calls every reward function on the group at once, each in a daemon thread of
its own (an `async def` function runs in an event loop there), and waits for all of them until one shared
deadline (`task.reward_timeout`). The rewards are TRL's: each function returns one value per completion, `None`
meaning "not applicable"; a completion's reward is the weighted sum of its non-None values (0.0 when every
function said None, as TRL's nansum). A function that raises, does not answer in time (`timeout`), returns a list
of the wrong length (`wrong_length`) or a value that is not a finite real (`non_finite`) fails the group: the
group gets no rewards (it is not trained on) and `failures["<function>_<kind>"]` counts it. A function whose
earlier calls still hang in `MAX_STUCK` threads is not called again until one returns (counted as `timeout`).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from swarmnode.tasks.base import Prompt, Scored
from swarmnode.tasks.chat import trl_completion, trl_prompt
from swarmnode.tasks.reward_func import RewardFunc

FAILURE_KINDS = ("raised", "timeout", "wrong_length", "non_finite")
MAX_STUCK = 4  # hung calls of one function (their threads still alive) before it is not called any more


class _Call(threading.Thread):
    def __init__(self, fn: Callable[[], Any]):
        super().__init__(daemon=True, name="swarmnode-reward")
        self.fn = fn
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            value = self.fn()
            self.value = asyncio.run(value) if inspect.isawaitable(value) else value  # type: ignore[arg-type]
        except BaseException as exc:  # a reward function may raise anything; it is counted, never propagated
            self.error = exc


def _checked(value: Any, n: int) -> tuple[list[float | None] | None, str | None]:
    """(values, None) or (None, failure kind) for a function's answer on n completions."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) and not hasattr(value, "tolist"):
        return None, "wrong_length"
    items = list(value.tolist() if hasattr(value, "tolist") else value)
    if len(items) != n:
        return None, "wrong_length"
    out: list[float | None] = []
    for item in items:
        if item is None:
            out.append(None)
        elif isinstance(item, numbers.Real) and math.isfinite(float(item)):
            out.append(float(item))
        else:
            return None, "non_finite"
    return out, None


class RewardRunner:
    """Reward functions with weights and a time limit (see the module docstring); `failures` counts per function."""

    def __init__(self, funcs: list[RewardFunc], weights: list[float] | None, timeout: float):
        self.funcs, self.timeout = funcs, timeout
        self.weights = list(weights) if weights is not None else [1.0] * len(funcs)
        self.failures: Counter[str] = Counter()
        self._stuck: dict[str, list[_Call]] = {f.name: [] for f in funcs}
        self._lock = threading.Lock()

    def _call(self, rf: RewardFunc, prompt: Prompt, texts: list[str]) -> Callable[[], Any]:
        if not rf.trl:
            return lambda: rf.func(prompt, texts)
        n = len(texts)
        columns = {"answer": prompt.reference, **prompt.columns}
        kwargs = {key: [value] * n for key, value in columns.items()}
        prompts = [trl_prompt(prompt.text)] * n
        completions = [trl_completion(t, prompt.text) for t in texts]
        return lambda: rf.func(prompts=prompts, completions=completions, **kwargs)

    def _start(self, rf: RewardFunc, fn: Callable[[], Any]) -> _Call | None:
        with self._lock:
            alive = self._stuck[rf.name] = [c for c in self._stuck[rf.name] if c.is_alive()]
            if len(alive) >= MAX_STUCK:
                return None
        call = _Call(fn)
        call.start()
        return call

    def score(self, prompt: Prompt, texts: list[str]) -> Scored:
        """The group's rewards, or no rewards and the failures (counted in `failures`)."""
        calls = [(rf, self._start(rf, self._call(rf, prompt, texts))) for rf in self.funcs]
        start = time.monotonic()
        per_func: list[list[float | None]] = []
        failed: list[str] = []
        for rf, call in calls:
            if call is not None:
                call.join(max(0.0, self.timeout - (time.monotonic() - start)))
            if call is None or call.is_alive():
                if call is not None:
                    with self._lock:
                        self._stuck[rf.name].append(call)
                failed.append(f"{rf.name}_timeout")
                continue
            if call.error is not None:
                failed.append(f"{rf.name}_raised")
                continue
            values, kind = _checked(call.value, len(texts))
            if values is None:
                failed.append(f"{rf.name}_{kind}")
                continue
            per_func.append(values)
        if failed:
            with self._lock:
                self.failures.update(failed)
            return Scored(None, tuple(failed))
        rewards = (
            [sum(w * v for w, v in zip(self.weights, column) if v is not None) for column in zip(*per_func)]
            if per_func
            else [0.0] * len(texts)
        )
        return Scored([float(r) for r in rewards])
