"""Single-process RL: one sampler and one learner in one loop, no network. The swarm's reference point.

Each round the sampler generates one batch with the weights it holds and hands the groups to the learner's
buffer; the learner then takes every step the buffer allows. Published versions go to the sampler through a
queue of the last `staleness + 1` versions, so with `staleness = k` rollouts come from the weights of k versions
ago (artificial staleness; 0 = on-policy). The checkpoint carries the learner state plus the version queue,
the sampler's prompt RNG and the curve, so a killed run restarts where its last checkpoint left it.
"""

from __future__ import annotations

import random
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Callable

import torch

from swarmnode.config import NodeConfig
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.checkpoint import StopFlag, as_tuples
from swarmnode.learner.loop import LearnerLoop
from swarmnode.models import load_model, load_tokenizer, pick_device
from swarmnode.sampler.engines import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.tasks import build_task

CURVE_KEYS = ("step", "version", "reward_mean", "staleness_mean", "loss", "kl", "is_weight_var", "clip_fraction",
              "grad_norm", "zero_signal_fraction")


class LocalTrainer:
    """Sampler + learner in one process; `run(steps)` trains until the learner has taken `steps` steps."""

    def __init__(self, cfg: NodeConfig, staleness: int = 0, checkpoint_dir: Path | str | None = None,
                 progress: Callable[[str], None] | None = print):
        if staleness < 0:
            raise ValueError(f"staleness must be >= 0 (got {staleness})")
        self.cfg, self.staleness, self.progress = cfg, staleness, progress or (lambda _msg: None)
        self.task = build_task(cfg.task)
        tokenizer = load_tokenizer(cfg.model, cfg.task)
        model = load_model(cfg.model, cfg.task, pick_device(cfg.learner.device))
        # the artificial staleness must not be refused by the learner's own bound
        self.buffer = ReplayBuffer(cfg.learner.buffer_size, max(cfg.sync.max_staleness, staleness),
                                   1.0, cfg.learner.draw_order)
        self.queue: deque[tuple[int, dict[str, torch.Tensor]]] = deque(maxlen=staleness + 1)
        self.learner = LearnerLoop(model, tokenizer, self.task, cfg, self.buffer, self._published, checkpoint_dir)
        self.sampler = SamplerLoop(build_engine(cfg), self.task, cfg, Identity.generate(), self._receive)
        extra = self.learner.extra_state
        self.curve: list[dict] = list(extra.get("curve", []))
        if self.learner.resumed:
            self.queue.extend((int(v), s) for v, s in extra.get("versions", []))
            if "sampler_rng" in extra:
                self.sampler.rng.setstate(as_tuples(extra["sampler_rng"]))
        if not self.queue:
            self.queue.append((self.learner.version, self.learner.state_snapshot()))
        self._offer()
        self.learner.on_step = self._record
        self.learner.extra_state = self._extra

    def _receive(self, group) -> None:
        self.buffer.add(group)

    def _published(self, version: int, state: dict[str, torch.Tensor]) -> None:
        self.queue.append((version, state))
        self._offer()

    def _offer(self) -> None:
        version, state = self.queue[0]  # the weights of `staleness` versions ago (or the oldest we have)
        self.sampler.offer_weights(state, version)  # ignored unless newer than what the sampler holds

    def _extra(self) -> dict:
        """The trainer's part of the checkpoint: version queue, sampler RNG, curve."""
        return {
            "versions": [[v, s] for v, s in self.queue],
            "sampler_rng": self.sampler.rng.getstate(),
            "curve": self.curve,
            "staleness": self.staleness,
        }

    def run(self, steps: int, stop: StopFlag | None = None, max_seconds: float | None = None) -> dict:
        """Train until `steps` learner steps in total (counting those before a resume); returns the summary."""
        start = time.monotonic()
        stopped = None
        while self.learner.step_count < steps:
            if stop is not None and stop.requested:
                stopped = "signal"
                break
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                stopped = "time"
                break
            self.sampler.step()
            while self.learner.step_count < steps and self.learner.step() is not None:
                pass
        self.learner.save()
        return self.summary(stopped)

    def _record(self, diag: dict) -> None:
        point = {k: float(diag[k]) for k in CURVE_KEYS if k in diag}
        self.curve.append(point)
        self.progress(
            f"step {int(diag['step']):4d}  v{int(diag['version'])}  reward {diag['reward_mean']:.3f}  "
            f"staleness {diag.get('staleness_mean', 0):.1f}  loss {diag['loss']:+.4f}  kl {diag['kl']:.4f}  "
            f"w_var {diag['is_weight_var']:.2e}  clip {diag['clip_fraction']:.2f}  gnorm {diag['grad_norm']:.3f}"
        )

    def summary(self, stopped: str | None = None) -> dict:
        """learner_steps, version, reward_start/reward_end (mean over the first/last 10% of steps), the curve."""
        rewards = [p["reward_mean"] for p in self.curve]
        tenth = max(1, len(rewards) // 10)
        return {
            "learner_steps": self.learner.step_count,
            "version": self.learner.version,
            "loss_type": self.cfg.learner.loss_type,
            "staleness": self.staleness,
            "resumed": self.learner.resumed,
            "stopped": stopped,
            "reward_start": statistics.fmean(rewards[:tenth]) if rewards else None,
            "reward_end": statistics.fmean(rewards[-tenth:]) if rewards else None,
            "buffer": self.buffer.stats(),
            "rejected": dict(self.learner.rejected),
            "curve": self.curve,
        }


def train_local(cfg: NodeConfig, steps: int, staleness: int = 0, checkpoint_dir: Path | str | None = None,
                progress: Callable[[str], None] | None = print, max_seconds: float | None = None) -> dict:
    """Build a LocalTrainer and run it to `steps` with SIGTERM/SIGINT turned into checkpoint-and-stop."""
    random.seed(cfg.task.seed)
    torch.manual_seed(cfg.task.seed)
    trainer = LocalTrainer(cfg, staleness, checkpoint_dir, progress)
    with StopFlag() as stop:
        return trainer.run(steps, stop, max_seconds)
