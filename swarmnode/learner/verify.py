"""Spot verification of samplers: the learner recomputes the behaviour log-probs of a sample of groups and
catches a sampler whose claimed log-probs are not the ones the weights of its claimed version give.

No claimed version escapes. The learner keeps the weights of every version a group may still claim (the last
`sync.max_staleness` + 1 published versions: the CPU copies it published anyway, adapters alone under LoRA)
while they fit in `trust.verify_keep_bytes`; when they do not fit (a large model trained in full), the staleness
bound the learner accepts narrows to what it keeps (`checkable_staleness`, said once in the log). A group drawn
for a check whose claimed version the learner does not keep is refused (counted `uncheckable`, the sender is not
struck), unless the claim is older than the process (a version published before a restart, whose weights are
gone: a swarm learner reloads the window's versions from its weight store, so only what fell out of it) or the
group was acknowledged before a crash: those are trained unchecked (counted `replayed_unchecked`).

Who is checked: a sampler key starts on probation, every group checked, until `trust.probation_checks` checks
came out clean; from then on its check rate is `probation_checks / clean checks`, falling towards
`trust.verify_fraction`, its floor (a throwaway key gets no cheaper checks than any new key). A sampler caught once
is checked at rate 1 from then on (remembered for the `MAX_TRACKED` most recent keys), and the caller drops its
groups still in the buffer. What one step may spend and let through is budgeted per step
(`learner.check_budget`): a key's unchecked groups and the checks of keys at rate 1.

The check runs one no-grad forward over the group's completions at its temperature under the weights of its
version, swapped into the live model and back (under LoRA only the adapters move; no copy of the model is made
on the device; a full-weight swap keeps the live weights on the CPU meanwhile). It compares the distribution of
the per-token differences with limits that scale with `trust.verify_tolerance` (`learner.mismatch`: the median,
mean and mean absolute difference, the share of tokens off by more than 4x the tolerance, and each completion's
summed difference), so a lie shaped to cancel out is refused (counted `logprob_mismatch`) and its sender struck.
A seeded group drawn replayably (`trust.seeded_groups`) is replayed from the same logits (`model.replay`): one
whose tokens were not drawn from its seed is refused too (reason `drawn`, counted `draw_mismatch`).
The false-positive rate and the shaped lies caught are measured in bench/verify-tolerance/ (docs/trust.md). Each
sampler's score is an exponential moving average of its groups' mean |difference| (`scores`) and of their KL
estimate (`kl`), shown in the learner's health record (`verified_peers`, `verified_mismatch`, `verified_kl`)
and in /metrics; `status` compares each sampler's KL with the run's other samplers'.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import torch

from swarmnode.config import TrustConfig
from swarmnode.learner.draw_check import judge_draws
from swarmnode.learner.lora import adapter_state, is_lora, load_adapter_state
from swarmnode.learner.mismatch import Mismatch, group_mismatch
from swarmnode.model.draws import completion_seeds, group_seed
from swarmnode.model.replay import draw_gaps, replay_scores

logger = logging.getLogger(__name__)

__all__ = ["CHECK", "SKIP", "UNCHECKABLE", "Mismatch", "SpotChecker", "group_mismatch", "swapped", "version_bytes"]

EMA = 0.2  # weight of the newest mismatch in a sampler's score
MAX_SCORED = 64  # samplers whose score is remembered (the most recently checked)
MAX_TRACKED = 4096  # samplers whose clean-check count or catch is remembered (the most recently seen)

CHECK, SKIP, UNCHECKABLE = "check", "skip", "uncheckable"


def version_bytes(model: torch.nn.Module, element_size: int) -> int:
    """Bytes one kept version takes: the adapters under LoRA, else every parameter, at `element_size` bytes."""
    tensors = adapter_state(model).values() if is_lora(model) else model.parameters()
    return sum(t.numel() for t in tensors) * element_size


class _Bounded(OrderedDict):
    """A dict that forgets its least recently written keys beyond `cap`."""

    def __init__(self, cap: int):
        super().__init__()
        self.cap = cap

    def put(self, key, value) -> None:
        self.pop(key, None)
        self[key] = value
        while len(self) > self.cap:
            self.popitem(last=False)


class SpotChecker:
    """Decides which groups to verify, recomputes their log-probs and keeps per-sampler records."""

    def __init__(self, trust: TrustConfig, window: int, seed: int = 0):
        self.fraction, self.tolerance = trust.verify_fraction, trust.verify_tolerance
        self.replay, self.draw_tolerance = trust.seeded_groups, trust.draw_tolerance
        self.keep_bytes, self.probation = trust.verify_keep_bytes, trust.probation_checks
        self.window = window  # versions a group may claim (max_staleness + 1); fewer are kept if they do not fit
        self.kept: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()  # version -> its published weights
        self.rng = random.Random(f"verify:{seed}")
        self.scores: dict[str, float] = {}  # sampler id -> EMA of its checked groups' mean |d| (nats per token)
        self.kl: dict[str, float] = {}  # sampler id -> EMA of its checked groups' KL estimate (nats per token)
        self.clean: _Bounded = _Bounded(MAX_TRACKED)  # sampler id -> clean checks in a row
        self.caught: _Bounded = _Bounded(MAX_TRACKED)  # sampler id -> times caught
        self.caught_now: set[str] = set()  # caught since the caller last cleared it (its step drops their groups)
        self.passed: _Bounded = _Bounded(MAX_TRACKED)  # sampler id -> groups let through (unchecked or clean)
        self.counts: Counter[str] = Counter()  # "checked", "rejected", "uncheckable"
        self.seconds = 0.0  # time spent recomputing (for the cost bench)

    @property
    def enabled(self) -> bool:
        return self.fraction > 0

    def checkable_staleness(self, bytes_per_version: int) -> int | None:
        """The largest staleness whose claims can all be checked when one version takes `bytes_per_version`
        (None: the whole window fits, or checks are off)."""
        if not self.enabled:
            return None
        fits = self.keep_bytes // max(1, bytes_per_version)
        if fits >= self.window:
            return None
        self.window = max(1, fits)
        return self.window - 1

    def remember(self, version: int, state: dict[str, torch.Tensor]) -> None:
        """Keep a published version's weights (the CPU snapshot that was published; under LoRA its adapters)."""
        if not self.enabled:
            return
        self.kept[int(version)] = state
        while len(self.kept) > self.window:
            self.kept.popitem(last=False)

    def rate(self, sampler_id: str) -> float:
        """The probability that a group of `sampler_id` is checked: 1 on probation and after a catch, then
        `probation_checks / clean checks`, never below `verify_fraction`."""
        if sampler_id in self.caught:
            return 1.0
        clean = self.clean.get(sampler_id, 0)
        if clean < self.probation:
            return 1.0
        return max(self.fraction, self.probation / max(1, clean))

    def suspect(self, sampler_id: str) -> bool:
        """Whether `sampler_id` is on probation or was caught (every group checked): what a join wave costs."""
        return self.enabled and (sampler_id in self.caught or self.clean.get(sampler_id, 0) < self.probation)

    def drawn(self, sampler_id: str) -> bool:
        """Whether a group of `sampler_id` is drawn for a check (with probability `rate`)."""
        return self.enabled and self.rng.random() < self.rate(sampler_id)

    def decide(
        self, sampler_id: str, version: int, current: int, exact_weights: bool, drawn: bool | None = None
    ) -> str:
        """CHECK, SKIP (not drawn) or UNCHECKABLE (drawn, but the claimed version's weights are not kept);
        `drawn`: the draw already made (`learner.check_budget`), else drawn here."""
        if not self.enabled or not (self.drawn(sampler_id) if drawn is None else drawn):
            self.passed.put(sampler_id, self.passed.get(sampler_id, 0) + 1)
            return SKIP
        if version in self.kept or (version == current and exact_weights):
            return CHECK
        self.counts["uncheckable"] += 1
        return UNCHECKABLE

    def mismatch(self, model, group, pad_id: int, autocast: Callable[[], Any], current: int | None = None) -> Mismatch:
        """`group_mismatch` of `group` under the weights of the version it claims (the live weights when that is
        `current`, else its kept weights swapped in for the forward)."""
        began = time.perf_counter()
        swap = (
            contextlib.nullcontext()
            if group.policy_version == current
            else swapped(model, self.kept[int(group.policy_version)])
        )
        training = model.training
        model.eval()  # as the sampler's engine ran it
        try:
            with swap, torch.no_grad(), autocast():
                scores = replay_scores(
                    model, [group.prompt_tokens] * len(group.completions), group.completions, group.temperature, pad_id
                )
        finally:
            model.train(training)
        claimed = torch.zeros_like(scores.logp, dtype=torch.float32)
        for i, lp in enumerate(group.logprobs):
            claimed[i, : len(lp)] = torch.as_tensor(lp, dtype=torch.float32)
        found = group_mismatch(scores.logp, claimed, scores.mask, self.tolerance)
        if found.passed and self.replay and group.draw is not None and group.draw[2]:
            seed = group_seed(group.run_id, group.sampler_id, group.draw[0], group.draw[1])
            gaps = draw_gaps(scores, completion_seeds(seed, len(group.completions)))
            off, _, drawn = judge_draws(gaps, scores.mask, self.draw_tolerance)
            found = dataclasses.replace(found, off_draws=off, reason=None if drawn else "drawn")
        self.seconds += time.perf_counter() - began
        return found

    def judge(self, sampler_id: str, mismatch: Mismatch) -> bool:
        """Record a checked group's statistics; True when it passes (one more clean check), False when the
        sampler is caught (checked at rate 1 from now on)."""
        for scores, value in ((self.scores, mismatch.mean_abs), (self.kl, mismatch.kl)):
            previous = scores.pop(sampler_id, None)  # re-inserted: the dict stays in order of last check
            scores[sampler_id] = value if previous is None else (1 - EMA) * previous + EMA * value
            while len(scores) > MAX_SCORED:
                scores.pop(next(iter(scores)))
        self.counts["checked"] += 1
        if mismatch.passed:
            self.clean.put(sampler_id, self.clean.get(sampler_id, 0) + 1)
            self.passed.put(sampler_id, self.passed.get(sampler_id, 0) + 1)
            return True
        self.counts["rejected"] += 1
        self.catch(sampler_id)
        return False

    def catch(self, sampler_id: str) -> None:
        """`sampler_id` was caught (a lie found here, or a far-out group: `learner.typicality`): checked at rate 1
        from now on, its clean checks forgotten."""
        self.clean.put(sampler_id, 0)
        self.caught.put(sampler_id, self.caught.get(sampler_id, 0) + 1)
        self.caught_now.add(sampler_id)

    def worst(self, n: int) -> list[tuple[str, float, float]]:
        """The `n` samplers with the highest KL estimate (sampler id, mean |d|, KL), worst first."""
        ranked = sorted(self.scores, key=lambda k: (-self.kl.get(k, 0.0), -self.scores[k]))[:n]
        return [(k, self.scores[k], self.kl.get(k, 0.0)) for k in ranked]


@contextlib.contextmanager
def swapped(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> Iterator[None]:
    """`model` holding `state` (adapters under LoRA, else its whole state dict) inside the block, its own weights
    again after it. The live tensors wait on the CPU; the model is never copied on its device."""
    lora = is_lora(model)
    live = adapter_state(model) if lora else model.state_dict()
    saved = {k: v.detach().to("cpu", copy=True) for k, v in live.items()}
    load = (lambda s: load_adapter_state(model, s)) if lora else (lambda s: model.load_state_dict(s))
    with torch.no_grad():
        load(state)
    try:
        yield
    finally:
        with torch.no_grad():
            load(saved)
