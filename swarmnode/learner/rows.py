"""A received rollout group -> the rows a learner trains on, or a counted refusal.

The learner trusts nothing a group says about itself that it can check: the prompt must be one of its task's
training prompts (unknown ids and held-out evaluation prompts are refused), the prompt tokens must be the
learner's own tokenisation of that prompt, every completion needs one behaviour log-prob per token, and the
rewards are recomputed from the decoded completions (the sender's rewards are only a hint: a difference is
counted, the learner's own rewards are used). A group whose reward functions fail (raise, hang past
`task.reward_timeout`, a wrong length, a non-finite value) is refused, counted as `reward_<function>_<kind>`.
"""

from __future__ import annotations

import functools
from collections import Counter

from swarmnode.model.prompting import encode_prompt

PROMPT_CACHE = 4096  # prompts whose tokenisation the learner remembers
STRUCK_ROWS = ("unknown_prompt", "eval_prompt", "prompt_mismatch", "bad_shape")  # refusals its sender earned


class Row:
    """One completion of a group, as the loss sees it."""

    __slots__ = ("group", "prompt_tokens", "completion", "logq", "reward", "temperature", "staleness")

    def __init__(self, group, completion, logq, reward, staleness):
        self.group, self.completion, self.logq, self.reward = group, completion, logq, reward
        self.prompt_tokens, self.temperature, self.staleness = group.prompt_tokens, group.temperature, staleness


class GroupRows:
    """Validates groups against the learner's task and tokenizer; refusals are counted in `rejected`."""

    def __init__(self, task, tokenizer, max_prompt_length: int, rejected: Counter[str]):
        self.task, self.tokenizer, self.rejected = task, tokenizer, rejected
        self.refusal: str | None = None  # why the last `rows` call refused its group (None: it did not)
        self._encode_prompt = functools.lru_cache(PROMPT_CACHE)(
            lambda text: tuple(encode_prompt(tokenizer, text, max_prompt_length))
        )

    def prompt_tokens(self, text: str) -> list[int]:
        """The learner's own tokenisation of a prompt (the sampler engines' encoder, chat template included);
        remembered for the last `PROMPT_CACHE` prompts used (a task's prompts come back)."""
        return list(self._encode_prompt(text))

    def rows(self, group, version: int) -> list[Row] | None:
        """Validated rows of one group with recomputed rewards and their staleness against `version`, or None
        (counted, and said in `refusal`) if the group must be refused."""
        self.refusal = None
        prompt = self.task.get(group.prompt_id)
        if prompt is None:
            return self._refuse("unknown_prompt")
        if self.task.held_out(prompt):
            return self._refuse("eval_prompt")
        if list(group.prompt_tokens) != self.prompt_tokens(prompt.text):
            return self._refuse("prompt_mismatch")
        if len(group.logprobs) != len(group.completions) or any(
            len(lp) != len(c) for lp, c in zip(group.logprobs, group.completions)
        ):
            return self._refuse("bad_shape")
        texts = self.tokenizer.batch_decode(group.completions, skip_special_tokens=True)
        scored = self.task.score(prompt, texts)  # reward functions run off this thread, with a time limit
        if scored.rewards is None:
            self.rejected.update(f"reward_{f}" for f in scored.failures)  # per function and kind; not trained on
            return None
        rewards = scored.rewards
        if any(abs(a - b) > 1e-6 for a, b in zip(rewards, group.rewards)):
            self.rejected["reward_hint_mismatch"] += 1  # counted, not rejected: our rewards are used
        tau = version - int(group.policy_version)
        return [Row(group, c, lq, r, tau) for c, lq, r in zip(group.completions, group.logprobs, rewards)]

    def _refuse(self, reason: str) -> list[Row] | None:
        self.rejected[reason] += 1
        self.refusal = reason
        return None
