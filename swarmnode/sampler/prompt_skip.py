"""Prompts a learner told this sampler came back all-solved or all-failed (in its acks, `s`): the sampler spends
less time there. A drawn prompt that is in the set is drawn again with probability 1 - KEEP_SHARE (up to
REDRAWS times), so a saturated prompt still comes back now and then: the policy moves, and a prompt whose group
shows signal again is told 'open' and drawn as any other from then on."""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any

KEEP_SHARE = 0.125  # a told prompt still drawn this often (its outcome can change as the policy learns)
REDRAWS = 4
REMEMBER = 4096  # prompts remembered (the most recently told)


class SkippedPrompts:
    """The prompt ids told saturated ('solved' | 'failed'), the most recent `REMEMBER`."""

    def __init__(self) -> None:
        self.told: OrderedDict[str, str] = OrderedDict()
        self.redrawn = 0  # draws replaced, for the log and tests

    def update(self, prompts: Any) -> None:
        """Take an ack's `s` field (prompt id -> 'solved' | 'failed', or 'open': no longer skipped); anything else
        is ignored."""
        if not isinstance(prompts, dict):
            return
        for prompt_id, outcome in list(prompts.items())[:REMEMBER]:
            if isinstance(prompt_id, str) and outcome in ("solved", "failed"):
                self.told[prompt_id] = outcome
                self.told.move_to_end(prompt_id)
            elif isinstance(prompt_id, str) and outcome == "open":
                self.told.pop(prompt_id, None)
        while len(self.told) > REMEMBER:
            self.told.popitem(last=False)

    def sample(self, task: Any, n: int, rng: random.Random) -> list:
        """`n` of `task`'s training prompts drawn with `rng`, told-saturated ones mostly drawn again."""
        prompts = task.sample(n, rng)
        if not self.told:
            return prompts
        out = []
        for prompt in prompts:
            for _ in range(REDRAWS):
                if str(prompt.prompt_id) not in self.told or rng.random() < KEEP_SHARE:
                    break
                self.redrawn += 1
                prompt = task.sample(1, rng)[0]
            out.append(prompt)
        return out
