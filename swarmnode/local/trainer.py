"""Single-process RL: one sampler and one learner in one loop, no network. The swarm's reference point.

Each round the sampler generates one batch with the weights it holds and hands the groups to the learner's
inbox (the `RolloutSink` a swarm learner's receiver also feeds: `SamplerLoop` and `LearnerLoop` run the same); the learner then takes every step the buffer allows. How the sampler's weights lag, in learner steps:
- `staleness = k` (artificial staleness, exact): the sampler always holds the weights of k versions ago
  (0 = on-policy).
- `delay = DelayModel` (latency experiments, as HeteroRL did, and as a swarm sampler with `--simulate-delay`
  on weights behaves): the sampler syncs continually; a sync takes the newest version when it starts and
  delivers it d steps later (d drawn per sync), then the next sync starts. When the sampler falls more than
  `sync.max_staleness` behind (`staleness.too_stale`, the rule a swarm sampler pauses and fetches by) it syncs
  to the newest version at once; those are counted as forced syncs.
Rollouts always carry their true version. Optionally the learner's policy is evaluated on the held-out prompts
every few steps.
The checkpoint carries the learner state plus the versions in flight, the sampler's prompt RNG, the curve and
the evaluations, so a killed run restarts where its last checkpoint left it.
"""

from __future__ import annotations

import random
import signal
import statistics
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import torch

from swarmnode.config import NodeConfig
from swarmnode.delay import DelayModel
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer, RolloutInbox
from swarmnode.learner.checkpoint import StopFlag, as_tuples
from swarmnode.learner.hooks import LearnerHooks
from swarmnode.learner.loop import LearnerLoop
from swarmnode.local.evaluation import evaluate
from swarmnode.model.models import load_model, load_tokenizer, pick_device
from swarmnode.observe.stall import StallWatch
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.staleness import too_stale
from swarmnode.tasks import build_task

CURVE_KEYS = (
    "step",
    "version",
    "reward_mean",
    "staleness_mean",
    "staleness_max",
    "loss",
    "kl",
    "is_weight_var",
    "ratio_peqq_var",
    "entropy",
    "completion_length_mean",
    "clip_fraction",
    "grad_norm",
    "zero_signal_fraction",
)


class LocalTrainer:
    """Sampler + learner in one process; `run(steps)` trains until the learner has taken `steps` steps."""

    def __init__(
        self,
        cfg: NodeConfig,
        staleness: int = 0,
        checkpoint_dir: Path | str | None = None,
        progress: Callable[[str], None] | None = print,
        delay: DelayModel | None = None,
        eval_every: int = 0,
        eval_samples: int = 4,
        seed: int | None = None,
    ):
        if staleness < 0:
            raise ValueError(f"staleness must be >= 0 (got {staleness})")
        if eval_every < 0 or eval_samples < 1:
            raise ValueError("eval_every must be >= 0 and eval_samples >= 1")
        self.cfg, self.staleness, self.progress = cfg, staleness, progress or (lambda _msg: None)
        self.delay = delay
        self.eval_every, self.eval_samples = eval_every, eval_samples
        # a fixed staleness must not be refused by the learner's own bound; a drawn delay obeys sync.max_staleness
        self.max_staleness = max(cfg.sync.max_staleness, staleness + 1) if delay is None else cfg.sync.max_staleness
        self.delay_rng = random.Random(f"delay:{cfg.task.seed if seed is None else seed}")
        self.task = build_task(cfg.task)
        self.tokenizer = load_tokenizer(cfg.model, cfg.task)
        model = load_model(cfg.model, cfg.task, pick_device(cfg.learner.device))
        self.buffer = ReplayBuffer(cfg.learner.buffer_size, self.max_staleness, 1.0, cfg.learner.draw_order)
        # the published versions the sampler may still be handed (the newest last), and the sync in flight
        self.recent: deque[tuple[int, dict[str, torch.Tensor]]] = deque(maxlen=staleness + 1 if delay is None else 1)
        self.sync: tuple[int, int, dict[str, torch.Tensor]] | None = None  # (arrival step, version, state)
        self.forced_syncs = 0
        # in one process versions stay full weights (under LoRA, the adapters folded in)
        self.learner = LearnerLoop(
            model,
            self.tokenizer,
            self.task,
            cfg,
            self.buffer,
            self._published,
            checkpoint_dir,
            adapter_versions=False,
            hooks=LearnerHooks(on_step=self._record, extra_state=self._extra),
        )
        self.inbox = RolloutInbox(self.buffer)  # the same delivery interface a swarm learner's receiver feeds
        self.sampler = SamplerLoop(
            build_engine(cfg),
            self.task,
            cfg.sampler,
            cfg.run_id,
            Identity.generate(),
            self.inbox.send,
            seed=cfg.task.seed if seed is None else seed,
        )
        self.watch = StallWatch(cfg.sampler.max_prompt_length, cfg.sampler.max_completion_length)  # says why no step
        extra = self.learner.restored_extra
        self.curve: list[dict] = list(extra.get("curve", []))
        self.evals: list[dict] = list(extra.get("evals", []))
        if self.learner.resumed:
            self.recent.extend((int(v), s) for v, s in extra.get("recent", []))
            if extra.get("sync"):
                arrival, version, state = extra["sync"]
                self.sync = (int(arrival), int(version), state)
            self.forced_syncs = int(extra.get("forced_syncs", 0))
            if "sampler_rng" in extra:
                self.sampler.rng.setstate(as_tuples(extra["sampler_rng"]))
            if "delay_rng" in extra:
                self.delay_rng.setstate(as_tuples(extra["delay_rng"]))
        if not self.recent:
            self.recent.append((self.learner.version, self.learner.state_snapshot()))
        self._deliver()

    def _published(self, version: int, state: dict[str, torch.Tensor]) -> None:
        self.recent.append((version, state))

    def _deliver(self) -> None:
        """Hand the sampler the weights it is due (see the module docstring); called between sampler batches."""
        if self.delay is None:  # exactly `staleness` versions behind (or the oldest version there is)
            version, state = self.recent[0]
            self.sampler.offer_weights(state, version)
            return
        now, (newest, newest_state) = self.learner.step_count, self.recent[-1]
        if too_stale(newest - self.sampler.offered_version, self.max_staleness):
            self.forced_syncs += 1
            self.sync = (now, newest, newest_state)
        if self.sync is not None and self.sync[0] <= now:
            _arrival, version, state = self.sync
            self.sampler.offer_weights(state, version)  # ignored unless newer than what the sampler holds
            self.sync = None
        if self.sync is None and newest > self.sampler.offered_version:
            self.sync = (now + round(self.delay.sample(self.delay_rng)), newest, newest_state)
            if self.sync[0] <= now:
                self._deliver()

    def _extra(self) -> dict:
        """The trainer's part of the checkpoint: versions the sampler may get, the sync in flight, RNGs, curve,
        evaluations."""
        return {
            "recent": [[v, s] for v, s in self.recent],
            "sync": list(self.sync) if self.sync else None,
            "sampler_rng": self.sampler.rng.getstate(),
            "delay_rng": self.delay_rng.getstate(),
            "forced_syncs": self.forced_syncs,
            "curve": self.curve,
            "evals": self.evals,
            "staleness": self.staleness,
        }

    def evaluate_now(self) -> dict:
        """Evaluate the learner's current policy on the held-out prompts (and on the validation prompts when the
        task has them: `val_reward`, for choosing a checkpoint); recorded in `evals`."""
        sc = self.cfg.sampler
        point = {"step": self.learner.step_count, "version": self.learner.version}
        for split in ("eval", "val") if self.task.validation_prompts() else ("eval",):
            point.update(
                evaluate(
                    self.learner.model,
                    self.tokenizer,
                    self.task,
                    samples=self.eval_samples,
                    temperature=sc.temperature,
                    max_new_tokens=sc.max_completion_length,
                    max_prompt_tokens=sc.max_prompt_length,
                    seed=self.cfg.task.seed,
                    split=split,
                )
            )
        self.evals.append(point)
        return point

    def run(self, steps: int, stop: StopFlag | None = None, max_seconds: float | None = None) -> dict:
        """Train until `steps` learner steps in total (counting those before a resume); returns the summary."""
        start = time.monotonic()
        stopped = None
        if self.eval_every and not self.evals:
            self.evaluate_now()
        while self.learner.step_count < steps:
            if stop is not None and stop.requested:  # Ctrl-C is "interrupted" (exit code 130), SIGTERM "signal" (0)
                stopped = "interrupted" if stop.signal == signal.SIGINT else "signal"
                break
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                stopped = "time"
                break
            self._deliver()
            self.watch.groups(self.sampler.step())
            while self.learner.step_count < steps and self.learner.step() is not None:
                pass
            if why := self.watch.due():
                self.progress(why)
        self.learner.save()
        return self.summary(stopped)

    def _record(self, diag: dict) -> None:
        self.watch.stepped()
        point = {k: float(v) for k, v in diag.items() if k in CURVE_KEYS or k.startswith("kl_tau_")}
        point["time"] = round(time.time(), 3)  # wall clock, as the swarm learner's steps file records it
        self.curve.append(point)
        if self.eval_every and int(diag["step"]) % self.eval_every == 0:
            self.evaluate_now()
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
            "algorithm": self.cfg.learner.algorithm,
            "staleness": self.staleness,
            "resumed": self.learner.resumed,
            "stopped": stopped,
            "reward_start": statistics.fmean(rewards[:tenth]) if rewards else None,
            "reward_end": statistics.fmean(rewards[-tenth:]) if rewards else None,
            "buffer": self.buffer.stats(),
            "rejected": dict(self.learner.rejected),
            "forced_syncs": self.forced_syncs,
            "curve": self.curve,
            "evals": self.evals,
        }


def train_local(
    cfg: NodeConfig,
    steps: int,
    staleness: int = 0,
    checkpoint_dir: Path | str | None = None,
    progress: Callable[[str], None] | None = print,
    max_seconds: float | None = None,
    delay: DelayModel | None = None,
    eval_every: int = 0,
) -> dict:
    """Build a LocalTrainer and run it to `steps` with SIGTERM/SIGINT turned into checkpoint-and-stop."""
    random.seed(cfg.task.seed)
    torch.manual_seed(cfg.task.seed)
    trainer = LocalTrainer(cfg, staleness, checkpoint_dir, progress, delay=delay, eval_every=eval_every)
    with StopFlag() as stop:
        return trainer.run(steps, stop, max_seconds)
