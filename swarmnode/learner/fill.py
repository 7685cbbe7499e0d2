"""Full steps: DAPO's dynamic sampling over what the learner holds (`learner.dynamic_sampling`).

A step that draws zero-signal groups (every completion of the prompt got the same reward: no advantage, no
gradient) draws again from the buffer until `prompts_per_step` groups carry signal or the buffer is spent. The step
then trains on at most `prompts_per_step` groups: every group with signal, and zero-signal groups only to make up
the number when the buffer ran out (so `loss_normaliser: drawn` keeps TRL's normaliser over a full batch); the
zero-signal groups beyond are consumed and counted (`zero_signal_skipped`). Each zero-signal group's prompt is
remembered with whether it came back all-solved or all-failed (`SaturatedPrompts`), for the node to tell its
samplers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from swarmnode.learner.rows import Row

SATURATED_KEEP = 1024  # prompts remembered as all-solved / all-failed (the most recent)
TELL_AT_ONCE = 64  # prompts one ack tells at most (a few KB)
OPEN = "open"  # told for a prompt noted saturated whose latest group carries signal again
TOLD_PEERS = 4096  # peers whose told-up-to mark is kept (the most recent; a forgotten one is told afresh)


def has_signal(rows: list[Row]) -> bool:
    """Whether a group's rewards differ (as `step_stats` judges it: an advantage that is not zero everywhere)."""
    return len({r.reward for r in rows}) > 1


class SaturatedPrompts:
    """The prompts whose latest group came back with one reward for every completion: 'solved' (the best reward
    the group saw is positive) or 'failed', the most recent `SATURATED_KEEP` of them; a noted prompt that shows
    signal again becomes 'open' (samplers told it saturated stop skipping it). `news_for(peer)` gives what that
    peer has not been told yet (the node puts it in its acks: the ack's `s`); the loop notes from its compute
    thread, the acks read from the event loop (a lock)."""

    def __init__(self, keep: int = SATURATED_KEEP) -> None:
        self.keep = keep
        self.prompts: OrderedDict[str, tuple[str, int]] = OrderedDict()  # prompt id -> (outcome, sequence number)
        self.seq = 0
        self.told: OrderedDict[str, int] = OrderedDict()  # peer -> the sequence number it was told up to
        self._lock = threading.Lock()

    def note(self, rows: list[Row]) -> None:
        """Record one validated group's outcome."""
        prompt_id = str(rows[0].group.prompt_id)
        with self._lock:
            signal = has_signal(rows)
            if signal and self.prompts.get(prompt_id, (OPEN, 0))[0] == OPEN:
                return  # never saturated, or told open already
            self.seq += 1
            outcome = OPEN if signal else "solved" if rows[0].reward > 0 else "failed"
            self.prompts[prompt_id] = (outcome, self.seq)
            self.prompts.move_to_end(prompt_id)
            while len(self.prompts) > self.keep:
                self.prompts.popitem(last=False)

    def snapshot(self) -> dict[str, str]:
        """prompt id -> 'solved' | 'failed' (the prompts saturated now)."""
        with self._lock:
            return {k: outcome for k, (outcome, _) in self.prompts.items() if outcome != OPEN}

    def news_for(self, peer: str, most: int = TELL_AT_ONCE) -> dict[str, str]:
        """The prompts noted since `peer` was last told (the newest `most`), and `peer` counted as told."""
        with self._lock:
            since = self.told.pop(peer, 0)
            self.told[peer] = self.seq
            while len(self.told) > TOLD_PEERS:  # a flood of throwaway keys must not grow it
                self.told.popitem(last=False)
            news = [(k, outcome) for k, (outcome, seq) in self.prompts.items() if seq > since]
            return dict(news[-most:])


def fill_with_signal(
    drawn: list[Any],
    groups: list[list[Row]],
    n: int,
    held: Callable[[], int],
    draw: Callable[[int], list[Any]],
    rows_of: Callable[[Any], list[Row] | None],
) -> tuple[list[Any], list[list[Row]], int]:
    """(every group drawn, the step's groups, zero-signal groups skipped): `groups` (the valid rows of `drawn`)
    topped up with groups that carry signal from `draw(k)` while fewer than `n` carry it and `held()` > 0."""
    signal = [g for g in groups if has_signal(g)]
    zero = [g for g in groups if not has_signal(g)]
    drawn = list(drawn)
    while len(signal) < n and held() > 0:
        more = draw(min(n - len(signal), held()))
        if not more:
            break
        drawn += more
        for group in more:
            rows = rows_of(group)
            if rows:
                (signal if has_signal(rows) else zero).append(rows)
    pad = max(0, n - len(signal))
    return drawn, signal + zero[:pad], len(zero) - min(pad, len(zero))
