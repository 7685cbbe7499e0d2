"""A peer's text group -> a training group in this node's own tokens, rewards and behaviour log-probs.

Nothing about the sender's model is trusted or assumed (it may be another size, another tokenizer):
- the prompt must be one of this node's task's training prompts (unknown ids and held-out eval prompts are
  refused) and the text the sender says it answered must be that prompt's text;
- completions are re-tokenised with this node's tokenizer (EOS appended where the sender's completion ended
  with its EOS) and cut to this node's `max_completion_length`;
- rewards are recomputed by this node's task from the re-tokenised text; the sender's claimed rewards are
  compared with the task's score of the text it sent, and a group with any difference is counted as a lie
  (the group is still used, with this node's rewards: the text itself may be fine);
- the behaviour log-probs the loss sees follow `sapo.external_weighting`:
  `on_policy` (SAPO): this node's current policy, computed now under the learner's own precision (its
  autocast), so the importance ratio is 1 up to rounding (gspo/grpo) and GEPO's group expectation is taken
  under the current policy;
  `sender_likelihood` (GEPO-style): the sender's sequence log-likelihood of the text spread evenly over this
  node's tokens of it, so the length-normalised LQ the loss computes is log q(y) / |y| in this node's tokens
  and the sequence-level weight is (p(y) / q(y))^(1/|y|); GEPO's denominator E_q[q] is then the group
  expectation under the sender's likelihoods. The group carries the sender's temperature (q was taken at it,
  so p is too). Only for the sequence-level losses (the config refuses it with token-level weights), and a
  group with a completion longer than this node's `max_completion_length` is refused (counted
  `truncated_likelihood`): the sender's likelihood is of the whole text, not of the part kept;
- with a `PlausibilityCheck` (`sapo.plausibility_check`), a group whose text this node's own policy would not
  have written is refused (counted `implausible`, and per peer by the check), whatever the weighting.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager

import torch

from swarmnode.config import SamplerConfig, SapoConfig
from swarmnode.model.logprobs import completion_logprobs
from swarmnode.node.sapo.plausibility import PlausibilityCheck
from swarmnode.protocol.rollout import RolloutGroup
from swarmnode.protocol.text_rollout import TextRolloutGroup
from swarmnode.tasks import Task

REWARD_TOLERANCE = 1e-6


class Rescorer:
    """Turns peers' text groups into this node's training groups (see the module docstring); counts refusals."""

    def __init__(
        self,
        model,
        tokenizer,
        task: Task,
        sc: SamplerConfig,
        sapo: SapoConfig,
        prompt_tokens: Callable[[str], list[int]],
        version: Callable[[], int],
        autocast: Callable[[], ContextManager] = contextlib.nullcontext,
        plausibility: PlausibilityCheck | None = None,
    ):
        """`sc`: this node's sampling settings (its temperature, its completion length); `sapo`: the run's SAPO
        settings; `autocast`: the learner's precision context (`Precision.autocast`), so that on-policy behaviour
        log-probs are computed exactly as the learner computes its own; `plausibility`: the check external
        text must pass (None: none)."""
        self.model, self.tokenizer, self.task, self.sc = model, tokenizer, task, sc
        self.plausibility = plausibility
        self.autocast = autocast
        self.prompt_tokens, self.version = prompt_tokens, version
        self.weighting = sapo.external_weighting
        self.eval_ids = {p.prompt_id for p in task.eval_prompts()}
        eos = tokenizer.eos_token_id
        self.eos = int(eos) if eos is not None else None
        self.rejected: collections.Counter[str] = collections.Counter()
        self.lies: collections.Counter[str] = collections.Counter()  # sender -> groups with a false reward

    def convert(self, groups: list[TextRolloutGroup]) -> list[RolloutGroup]:
        """The training groups of those `groups` this node accepts (refusals counted in `rejected`)."""
        built = []
        for group in groups:
            rows = self._rows(group)
            if rows is not None:
                built.append((group, *rows))
        if not built:
            return []
        own = None
        if self.weighting == "on_policy" or self.plausibility is not None:
            own = self._own_logprobs([b[1] for b in built], [b[2] for b in built])
        if self.plausibility is not None:
            kept = [i for i, b in enumerate(built) if self.plausibility.admit(b[0].sampler_id, own[i])]
            if len(kept) < len(built):
                self.rejected["implausible"] += len(built) - len(kept)
            built, own = [built[i] for i in kept], [own[i] for i in kept]
        if self.weighting == "sender_likelihood":
            logq = [
                [[seq / max(1, len(c))] * len(c) for c, seq in zip(comps, g.seq_logprobs)] for g, _, comps, _ in built
            ]
        else:
            logq = own
        out = []
        for (group, prompt_tokens, completions, rewards), lq in zip(built, logq):
            out.append(
                RolloutGroup(
                    run_id=group.run_id,
                    group_id=group.group_id,
                    prompt_id=group.prompt_id,
                    prompt_tokens=prompt_tokens,
                    completions=completions,
                    logprobs=lq,
                    temperature=self._temperature(group),
                    rewards=rewards,
                    policy_version=self.version(),
                    lineage=group.model_id,
                    sampler_id=group.sampler_id,
                    created_at=group.created_at,
                    signature=b"",
                )
            )
        return out

    def _rows(self, group: TextRolloutGroup):
        """(prompt tokens, completions, rewards) in this node's terms, or None (counted) if refused."""
        prompt = self.task.get(group.prompt_id)
        if prompt is None:
            self.rejected["unknown_prompt"] += 1
            return None
        if group.prompt_id in self.eval_ids:
            self.rejected["eval_prompt"] += 1
            return None
        if group.prompt_text != prompt.text:
            self.rejected["prompt_mismatch"] += 1
            return None
        claimed = self.task.score(prompt, list(group.completions)).rewards
        claimed_ok = claimed is not None and all(
            abs(mine - claim) <= REWARD_TOLERANCE for mine, claim in zip(claimed, group.rewards)
        )
        if not claimed_ok:
            self.lies[group.sampler_id] += 1
        limit = self.sc.max_completion_length
        completions = []
        for text, finished in zip(group.completions, group.finished):
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if finished and self.eos is not None:
                ids.append(self.eos)
            if len(ids) > limit and self.weighting == "sender_likelihood":
                self.rejected["truncated_likelihood"] += 1  # the sender's likelihood is of the whole text
                return None
            completions.append(ids[:limit])
        texts = self.tokenizer.batch_decode(completions, skip_special_tokens=True)
        scored = self.task.score(prompt, texts)
        if scored.rewards is None:
            self.rejected.update(f"reward_{f}" for f in scored.failures)
            return None
        return self.prompt_tokens(prompt.text), completions, scored.rewards

    def _temperature(self, group: TextRolloutGroup) -> float:
        """The temperature the group's behaviour log-probs were taken at (the learner computes p at it too)."""
        return float(group.temperature) if self.weighting == "sender_likelihood" else self.sc.temperature

    def _own_logprobs(self, prompts: list[list[int]], completions: list[list[list[int]]]) -> list[list[list[float]]]:
        """Per-token log-probs of every completion of every group under this node's current policy, at the
        sampling temperature and in the learner's precision."""
        rows_p = [p for p, comps in zip(prompts, completions) for _ in comps]
        rows_c = [c for comps in completions for c in comps]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), self.autocast():
                logp, _ = completion_logprobs(
                    self.model, rows_p, rows_c, self.sc.temperature, self.tokenizer.pad_token_id
                )
        finally:
            self.model.train(was_training)
        logp = logp.float().cpu().tolist()
        out, i = [], 0
        for comps in completions:
            out.append([logp[i + k][: len(c)] for k, c in enumerate(comps)])
            i += len(comps)
        return out
