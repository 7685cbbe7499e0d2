"""`HeldOutEval`: the learner scores the task's held-out split every `learner.eval_every` versions (and the
version it starts with), without stalling training.

Between two steps, on the step thread, the weights are copied into a second copy of the model (made once: the
learner holds the model twice while this is on); the copy is scored on a thread of its own
(`swarmnode.local.evaluation.evaluate`: k = `learner.eval_samples` completions per held-out prompt at the sampling
temperature, seeded by `task.seed`, so two evaluations of one version draw the same samples), while the learner
steps on. At most one evaluation runs at a time: a version falling due meanwhile waits for the next multiple.
The figures (`eval_reward` = mean@k, `eval_pass_at_k`, `eval_exact`, `eval_best`, `eval_version`) go into the next
step record (the steps file, the trackers) and the health record at once (`status`, the dashboard, `/metrics`);
a failing evaluation is said once and turns evaluation off, never training.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from swarmnode.compute_thread import ComputeThread
from swarmnode.config import NodeConfig
from swarmnode.learner.loop import LearnerLoop
from swarmnode.local.evaluation import evaluate
from swarmnode.tasks import Task

HISTORY = 16  # held-out rewards kept for the health record (and the alert)


class HeldOutEval:
    """See the module docstring. `on_result(health_fields)` is called on the event loop when figures land."""

    def __init__(
        self,
        learner: LearnerLoop,
        task: Task,
        tokenizer,
        cfg: NodeConfig,
        emit: Callable[[str], None],
        on_result: Callable[[dict[str, Any]], None],
    ) -> None:
        self.learner, self.task, self.tokenizer, self.cfg = learner, task, tokenizer, cfg
        self.emit, self.on_result = emit, on_result
        self.every = cfg.learner.eval_every
        self.due_version = learner.version  # the version it starts with is scored first (the baseline)
        self.thread = ComputeThread("learner-eval")
        self.copy: Any = None
        self.running: asyncio.Task | None = None
        self.history: deque[float] = deque(maxlen=HISTORY)
        self.best: float | None = None
        self.landed: dict[str, Any] = {}  # figures not yet in a step record
        self.latest: dict[str, Any] = {}  # the last evaluation's figures

    @property
    def enabled(self) -> bool:
        return self.every > 0 and bool(self.task.eval_prompts())

    async def maybe_start(self, compute: ComputeThread) -> None:
        """If the learner's version is due and no evaluation runs, copy the weights (on `compute`, the step thread)
        and start scoring them."""
        version = self.learner.version
        if not self.enabled or version < self.due_version or (self.running is not None and not self.running.done()):
            return
        await compute.run(self._copy_weights)
        self.due_version = (version // self.every + 1) * self.every
        self.running = asyncio.create_task(self._score(version))

    def _copy_weights(self) -> None:
        if self.copy is None:
            self.copy = copy.deepcopy(self.learner.model).requires_grad_(False)
        else:
            self.copy.load_state_dict(self.learner.model.state_dict())

    async def _score(self, version: int) -> None:
        sc, began = self.cfg.sampler, time.monotonic()
        try:
            figures = await self.thread.run(
                lambda: evaluate(
                    self.copy,
                    self.tokenizer,
                    self.task,
                    samples=self.cfg.learner.eval_samples,
                    temperature=sc.temperature,
                    max_new_tokens=sc.max_completion_length,
                    max_prompt_tokens=sc.max_prompt_length,
                    seed=self.cfg.task.seed,
                )
            )
        except Exception as error:  # an evaluation that fails turns evaluation off, never training
            self.every = 0
            self.emit(f"held-out evaluation failed and is off for the rest of the run: {type(error).__name__}: {error}")
            return
        reward = round(figures["eval_reward"], 6)
        self.history.append(reward)
        self.best = reward if self.best is None else max(self.best, reward)
        self.latest = self.landed = {
            "eval_reward": reward,
            "eval_pass_at_k": round(figures["eval_pass"], 6),
            "eval_exact": round(figures["eval_exact"], 6),
            "eval_prompts": int(figures["eval_prompts"]),
            "eval_version": version,
            "eval_best": self.best,
            "eval_seconds": round(time.monotonic() - began, 3),
        }
        k = self.cfg.learner.eval_samples
        self.emit(
            f"held-out: version {version}, reward {reward:.3f}, pass@{k} {figures['eval_pass']:.3f} "
            f"({self.landed['eval_prompts']} prompts, {self.landed['eval_seconds']:.1f} s; best {self.best:.3f})"
        )
        self.on_result(self.health())

    def take(self) -> dict[str, Any]:
        """The figures landed since the last call (for the next step record), or {}."""
        landed, self.landed = self.landed, {}
        return landed

    def health(self) -> dict[str, Any]:
        """The health record's held-out fields ({} before the first evaluation)."""
        if not self.latest:
            return {}
        shown = ("eval_reward", "eval_pass_at_k", "eval_best", "eval_version")
        return {**{k: self.latest[k] for k in shown}, "eval_history": list(self.history)}

    async def close(self) -> None:
        """Stop waiting for a running evaluation (its thread ends when the call returns)."""
        if self.running is not None and not self.running.done():
            self.running.cancel()
        self.thread.close()
