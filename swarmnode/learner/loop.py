"""The network-free learner loop: buffer -> validated batch -> GEPO/GSPO/GRPO step -> versions and checkpoints.

Per optimiser step: draw `prompts_per_step` groups; reject (and count) groups whose prompt id the task does not
know or whose prompt tokens differ from the learner's own tokenisation; recompute every reward from the decoded
completion (the sender's rewards are only a hint); skip zero-signal groups; split the rest into
`gradient_accumulation_steps` micro-batches of whole groups; compute log-probs at each row's sampling
temperature; `policy_loss`; AdamW with gradient clipping. Every `publish_every` steps the version goes up and
`publish(version, state_dict)` receives a CPU copy of the weights. Every `checkpoint_every` steps (and whenever
the caller asks, e.g. on SIGTERM) the whole state is written atomically; on construction with a checkpoint
directory holding one, the loop resumes at the same step and version.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch

from swarmnode.config import NodeConfig
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.checkpoint import CheckpointError, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from swarmnode.learner.losses import policy_loss
from swarmnode.logprobs import completion_logprobs

Publish = Callable[[int, dict[str, torch.Tensor]], None]


class _Row:
    __slots__ = ("group", "prompt_tokens", "completion", "logq", "reward", "temperature", "staleness")

    def __init__(self, group, completion, logq, reward, staleness):
        self.group, self.completion, self.logq, self.reward = group, completion, logq, reward
        self.prompt_tokens, self.temperature, self.staleness = group.prompt_tokens, group.temperature, staleness


class LearnerLoop:
    """One learner's training state and step; see the module docstring."""

    def __init__(
        self,
        model,
        tokenizer,
        task,
        cfg: NodeConfig,
        buffer: ReplayBuffer,
        publish: Publish | None = None,
        checkpoint_dir: Path | str | None = None,
    ):
        self.model, self.tokenizer, self.task, self.cfg, self.buffer = model, tokenizer, task, cfg, buffer
        self.lc = cfg.learner
        self.publish = publish
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=self.lc.learning_rate,
            weight_decay=self.lc.weight_decay,
        )
        self.rng = random.Random(cfg.task.seed)
        self.version = buffer.version
        self.step_count = 0
        self.rejected: Counter[str] = Counter()
        self.extra_state: dict[str, Any] | Callable[[], dict[str, Any]] = {}  # caller's state, checkpointed too
        self.on_step: Callable[[dict], None] | None = None  # sees each trained step's diagnostics before saving
        self.resumed = self.resume() if self.checkpoint_dir else False

    # ---- batch preparation -------------------------------------------------------------------------------
    def _prompt_tokens(self, text: str) -> list[int]:
        """The learner's own tokenisation of a prompt (as the sampler engines encode it)."""
        ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
        return list(ids[-self.cfg.sampler.max_prompt_length :])

    def _rows(self, group) -> list[_Row] | None:
        """Validated rows of one group with recomputed rewards, or None (counted) if it must be rejected."""
        prompt = self.task.get(group.prompt_id)
        if prompt is None:
            self.rejected["unknown_prompt"] += 1
            return None
        if list(group.prompt_tokens) != self._prompt_tokens(prompt.text):
            self.rejected["prompt_mismatch"] += 1
            return None
        if len(group.logprobs) != len(group.completions) or any(
            len(lp) != len(c) for lp, c in zip(group.logprobs, group.completions)
        ):
            self.rejected["bad_shape"] += 1
            return None
        texts = self.tokenizer.batch_decode(group.completions, skip_special_tokens=True)
        rewards = [float(self.task.reward(prompt, t)) for t in texts]
        if any(abs(a - b) > 1e-6 for a, b in zip(rewards, group.rewards)):
            self.rejected["reward_hint_mismatch"] += 1  # counted, not rejected: our rewards are used
        tau = self.version - int(group.policy_version)
        return [_Row(group, c, lq, r, tau) for c, lq, r in zip(group.completions, group.logprobs, rewards)]

    # ---- the step ----------------------------------------------------------------------------------------
    def step(self) -> dict | None:
        """One optimiser step from the buffer; its diagnostics, or None when the buffer holds too few groups."""
        if len(self.buffer) < self.lc.prompts_per_step:
            return None
        drawn = self.buffer.draw(self.lc.prompts_per_step)
        groups = [rows for g in drawn if (rows := self._rows(g))]
        rewards = [r.reward for rows in groups for r in rows]
        signal = [rows for rows in groups if len({r.reward for r in rows}) > 1]
        summary = {
            "reward_mean": statistics.fmean(rewards) if rewards else 0.0,
            "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            "zero_signal_fraction": 1 - len(signal) / len(groups) if groups else 0.0,
            "groups": float(len(groups)),
            "groups_trained": float(len(signal)),
            "sampler_ids": sorted({g.sampler_id for g in drawn}),
        }
        if groups:
            taus = [rows[0].staleness for rows in groups]
            summary.update(staleness_min=float(min(taus)), staleness_median=float(statistics.median(taus)),
                           staleness_max=float(max(taus)))
        if not signal:
            return {**summary, **self._status(), "trained": 0.0}
        diag = self._optimise(signal)
        self.step_count += 1
        if self.step_count % self.lc.publish_every == 0:
            self._bump_version()
        out = {**diag, **summary, **self._status(), "trained": 1.0}
        if self.on_step is not None:
            self.on_step(out)
        if self.checkpoint_dir and self.step_count % self.lc.checkpoint_every == 0:
            self.save()
        return out

    def _optimise(self, groups: list[list[_Row]]) -> dict:
        chunks = [c for c in _split(groups, self.lc.gradient_accumulation_steps) if c]
        total_rows = sum(len(rows) for rows in groups)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        diags: list[tuple[int, dict]] = []
        for chunk in chunks:
            loss, diag = self._chunk_loss(chunk)
            n = sum(len(rows) for rows in chunk)
            (loss * (n / total_rows)).backward()
            diags.append((n, diag))
        params = [p for p in self.model.parameters() if p.grad is not None]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.lc.max_grad_norm))
        if torch.isfinite(torch.tensor(grad_norm)):
            self.optimizer.step()
        else:
            self.rejected["nonfinite_grad_steps"] += 1
        self.optimizer.zero_grad(set_to_none=True)
        merged = _weighted_mean(diags)
        merged["grad_norm"] = grad_norm
        return merged

    def _chunk_loss(self, chunk: list[list[_Row]]) -> tuple[torch.Tensor, dict]:
        rows = [r for group in chunk for r in group]
        device = next(self.model.parameters()).device
        logp, mask = completion_logprobs(
            self.model, [r.prompt_tokens for r in rows], [r.completion for r in rows],
            [r.temperature for r in rows], self.tokenizer.pad_token_id,
        )
        logq = torch.zeros_like(logp, dtype=torch.float32)
        for i, r in enumerate(rows):
            if r.logq:
                logq[i, : len(r.logq)] = torch.as_tensor(r.logq, dtype=torch.float32)
        group_index = torch.tensor([gi for gi, group in enumerate(chunk) for _ in group], device=device)
        rewards = torch.tensor([r.reward for r in rows], device=device)
        staleness = torch.tensor([r.staleness for r in rows], device=device)
        return policy_loss(self.lc.algorithm, logp, logq.to(device), mask, rewards, group_index, self.lc, staleness,
                           shuffle_seed=self.step_count)

    def _status(self) -> dict:
        stats = self.buffer.stats()
        out = {"step": float(self.step_count), "version": float(self.version), "buffer_size": float(stats["size"]),
               "dropped_fraction": stats["dropped_fraction"]}
        out.update({f"rejected_{k}": float(v) for k, v in self.rejected.items()})
        return out

    def _bump_version(self) -> None:
        self.version += 1
        self.buffer.set_version(self.version)
        if self.publish is not None:
            self.publish(self.version, self.state_snapshot())

    def state_snapshot(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the current weights (what a published version holds)."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    # ---- checkpoints -------------------------------------------------------------------------------------
    def save(self) -> Path | None:
        """Write the checkpoint now (no-op without a checkpoint directory)."""
        if self.checkpoint_dir is None:
            return None
        return save_checkpoint(self.checkpoint_dir, {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
            "step": self.step_count,
            "rng": rng_state(self.rng),
            "buffer": self.buffer.state_dict(),
            "rejected": dict(self.rejected),
            "extra": self.extra_state() if callable(self.extra_state) else self.extra_state,
        })

    def resume(self) -> bool:
        """Load the checkpoint if there is one; True when resumed (same step and version as saved)."""
        state = load_checkpoint(self.checkpoint_dir)
        if state is None:
            return False
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, KeyError, ValueError) as exc:
            raise CheckpointError(f"checkpoint in {self.checkpoint_dir} does not fit this model/optimizer "
                                  f"({str(exc).splitlines()[0]})") from None
        self.version, self.step_count = int(state["version"]), int(state["step"])
        set_rng_state(state["rng"], self.rng)
        self.buffer.load_state_dict(state["buffer"])
        self.buffer.set_version(self.version)
        self.rejected = Counter(state.get("rejected", {}))
        self.extra_state = state.get("extra", {})
        return True


def _split(items: list, parts: int) -> list[list]:
    """`items` cut into `parts` contiguous, nearly equal pieces."""
    k, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + k + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def _weighted_mean(diags: list[tuple[int, dict]]) -> dict:
    """Row-weighted mean of each diagnostic over micro-batches (exact when there is one micro-batch)."""
    keys = {k for _, d in diags for k in d}
    out = {}
    for k in keys:
        pairs = [(n, d[k]) for n, d in diags if k in d]
        weight = sum(n for n, _ in pairs)
        out[k] = sum(n * v for n, v in pairs) / weight
    for k in ("staleness_min", "staleness_max", "is_weight_max"):
        if k in keys:
            out[k] = (min if k.endswith("min") else max)(d[k] for _, d in diags if k in d)
    return out
