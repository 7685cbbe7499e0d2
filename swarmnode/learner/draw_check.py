"""Seeded groups on the learner's side (`trust.seeded_groups`; `swarmnode.model.draws`): what a group's seed lets
it refuse, the gaps in each sampler key's counters, and the judgement of a replayed draw.

- `refusal`: a group without a draw (`unseeded`), one its engine could not draw replayably while the run refuses
  those (`unreplayed`), one whose prompt is not its seed's (`seed_prompt`: a sampler that picks its prompts), and
  one of a key whose counters show too many gaps (`draw_gaps`). All but `unreplayed` count against the sender.
- `DrawLedger`: per key, the counters of its current stream (its start count) that arrived, over its last
  `trust.gap_window` counters. Counters a key skipped are groups it made and kept back (a selective liar sends
  only the samples it likes); a key whose missing counters exceed `GAP_SLACK` + `trust.gap_share` x the window
  is distrusted. A new stream (a restart) carries the old stream's missing counters and `RESTART_CHARGE` more
  into the new one's first window, so restarting does not wipe the slate. With L designated learners a sampler
  splits its groups among them: each learner expects 1 / L of a key's counters.
- `judge_draws`: a checked group's tokens are drawn as seeded when at most `DRAW_SLACK` + `DRAW_SHARE` x its
  tokens lie further than `trust.draw_tolerance` outside their seeded interval (`model.replay.draw_gaps`).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from swarmnode.model.draws import group_seed, seeded_prompt

GAP_SLACK = 8  # missing counters always allowed: a sender's window of groups in flight arrives out of order
RESTART_CHARGE = 4  # missing counters a new stream starts with
DRAW_SLACK = 2  # tokens of a checked group that may lie outside their seeded interval
DRAW_SHARE = 0.05  # and this share of its tokens more
MAX_KEYS = 4096  # keys whose counters are remembered (the most recently seen)
STRUCK_DRAWS = ("unseeded", "seed_prompt", "draw_gaps")


class _Stream:
    """One key's current stream: the counters that arrived within the window below its highest."""

    __slots__ = ("stream", "top", "got", "carried")

    def __init__(self, stream: int, carried: float = 0.0):
        self.stream, self.top, self.carried = stream, -1, carried
        self.got: set[int] = set()


class DrawLedger:
    """Counters per sampler key (see the module docstring)."""

    def __init__(self, window: int, share: float, learners: int = 1):
        self.window, self.share, self.learners = window, share, max(1, learners)
        self.keys: dict[str, _Stream] = {}
        self._lock = threading.Lock()  # the network thread observes, the training thread judges

    def observe(self, sampler_id: str, draw: tuple[int, int, int] | None) -> None:
        """A group of `sampler_id` with `draw` arrived (whatever the buffer's verdict: it was made and sent)."""
        if draw is not None:
            with self._lock:
                self._observe(sampler_id, *draw[:2])

    def _observe(self, sampler_id: str, stream: int, counter: int) -> None:
        mine = self.keys.pop(sampler_id, None)
        if mine is None:
            mine = _Stream(stream)
        elif stream < mine.stream:  # a late group of a stream already left behind
            self.keys[sampler_id] = mine
            return
        elif stream > mine.stream:
            mine = _Stream(stream, min(self.window, self._missing(mine)[0] + RESTART_CHARGE))
        self.keys[sampler_id] = mine
        while len(self.keys) > MAX_KEYS:
            self.keys.pop(next(iter(self.keys)))
        if counter > mine.top:
            mine.top = counter
            low = counter - self.window + 1
            if len(mine.got) >= self.window:
                mine.got = {c for c in mine.got if c >= low}
        if counter > mine.top - self.window:
            mine.got.add(counter)

    def _missing(self, mine: _Stream) -> tuple[float, float]:
        """(missing counters, counters judged) of a stream's window, the carried ones included."""
        span = min(self.window, mine.top + 1)
        low = mine.top - span + 1
        got = sum(1 for c in mine.got if c >= low)
        carried = mine.carried * max(0.0, 1 - span / self.window)
        return max(0.0, span - got * self.learners) + carried, span + carried

    def missing(self, sampler_id: str) -> tuple[float, float]:
        """(missing counters, counters judged) of `sampler_id` (0, 0 for a key never seen)."""
        with self._lock:
            mine = self.keys.get(sampler_id)
            return (0.0, 0.0) if mine is None else self._missing(mine)

    def distrusted(self, sampler_id: str) -> bool:
        """Whether `sampler_id` kept back more of its counters than the bound allows."""
        missing, span = self.missing(sampler_id)
        return missing > GAP_SLACK + self.share * span


def refusal(group: Any, task: Any, trust: Any, ledger: DrawLedger | None) -> str | None:
    """Why a seeded run refuses `group` before its rows are built (None: it does not)."""
    if group.draw is None:
        return "unseeded"
    stream, counter, replayable = group.draw
    if not replayable and not trust.accept_unreplayed:
        return "unreplayed"
    prompt = seeded_prompt(task, group_seed(group.run_id, group.sampler_id, stream, counter))
    if str(prompt.prompt_id) != str(group.prompt_id):
        return "seed_prompt"
    if ledger is not None and ledger.distrusted(group.sampler_id):
        return "draw_gaps"
    return None


def judge_draws(gaps: torch.Tensor, mask: torch.Tensor, tolerance: float) -> tuple[int, int, bool]:
    """(tokens off their seeded interval by more than `tolerance`, tokens, whether the group passes)."""
    tokens = int(mask.sum())
    off = int(((gaps > tolerance) & mask).sum())
    return off, tokens, off <= DRAW_SLACK + DRAW_SHARE * tokens
