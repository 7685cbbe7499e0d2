"""Lies about behaviour log-probs shaped to pass a check that looks at few statistics (issue #47), as a hostile
sampler would tell them. Each takes a group's true claimed log-probs (one list per completion) and its rewards
and returns the lying ones, every value at most 0 (what the wire format admits): a `+x` goes only where the true
value is at most -x, so none is clamped away, and the `+` and `-` tokens are as many, so the mean cancels.

- `cancelling`: +-2 nats on 48 % of the group's tokens (the liar of issue #47: median and mean stay near 0);
- `shaped:<share>`: +-0.5 nats on `share` of the group's tokens;
- `advantage:<share>`: +-0.5 nats on `share` of the tokens of the completions with the largest advantage
  (reward above the group's mean: the tokens whose weights move the step);
- `advantage_down`: -0.5 nats on every token of the completion with the largest advantage (its importance
  weight up by e^0.5, the simplest lie that helps the liar's favourite answer);
- `long:<share>`: +-0.5 nats on `share` of the tokens of the completions longer than the group's median length.
`family()` names the generated family the tests and benches run: every kind at shares 0.1 to 0.5.
"""

from __future__ import annotations

import math
import random
import statistics

SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)
SIZE = 0.5  # nats per lying token in the shaped family


def family() -> list[str]:
    """The lie names of the generated family (each a `lie()` kind)."""
    return ["cancelling", "advantage_down"] + [
        f"{kind}:{s}" for kind in ("shaped", "advantage", "long") for s in SHARES
    ]


def _cancel(
    logprobs: list[list[float]], tokens: list[tuple[int, int]], size: float, rng: random.Random
) -> list[list[float]]:
    """`tokens` (completion, position) shifted by +size on half of them (where room allows) and -size on the rest."""
    out = [list(map(float, lp)) for lp in logprobs]
    tokens = list(tokens)
    rng.shuffle(tokens)
    room = [t for t in tokens if out[t[0]][t[1]] <= -size]
    up = room[: len(tokens) // 2]
    chosen = set(up)
    down = [t for t in tokens if t not in chosen][: len(tokens) - len(up)]
    for i, j in up:
        out[i][j] += size
    for i, j in down:
        out[i][j] -= size
    return out


def _share(tokens: list[tuple[int, int]], share: float, rng: random.Random) -> list[tuple[int, int]]:
    return rng.sample(tokens, min(len(tokens), max(1, math.ceil(share * len(tokens)))))


def lie(kind: str, logprobs: list[list[float]], rewards: list[float], seed: int = 0) -> list[list[float]]:
    """The lying log-probs of `kind` (module docstring) for a group with these true ones and rewards."""
    rng = random.Random(f"{kind}:{seed}")
    name, _, arg = kind.partition(":")
    every = [(i, j) for i, lp in enumerate(logprobs) for j in range(len(lp))]
    mean = statistics.fmean(rewards) if rewards else 0.0
    if name == "cancelling":
        return _cancel(logprobs, _share(every, 0.48, rng), 2.0, rng)
    if name == "advantage_down":
        best = max(range(len(logprobs)), key=lambda i: (rewards[i] - mean, len(logprobs[i])))
        return [[x - SIZE for x in lp] if i == best else list(map(float, lp)) for i, lp in enumerate(logprobs)]
    share = float(arg)
    if name == "shaped":
        pool = every
    elif name == "advantage":
        top = max(rewards) if rewards else 0.0
        pool = [(i, j) for i, j in every if rewards[i] >= top and (rewards[i] > mean or len(set(rewards)) == 1)]
    elif name == "long":
        median = statistics.median(len(lp) for lp in logprobs)
        pool = [(i, j) for i, j in every if len(logprobs[i]) > median] or [
            (i, j) for i, j in every if len(logprobs[i]) == max(len(lp) for lp in logprobs)
        ]
    else:
        raise ValueError(f"unknown lie {kind!r}")
    return _cancel(logprobs, _share(pool, share, rng), SIZE, rng)
