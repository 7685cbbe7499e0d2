"""Seeded draws: a group's prompt and sampling randomness fixed by a seed its sampler cannot pick, so a learner can
replay the sampling from its own logits (docs/trust.md).

A group's seed is sha256 of (run id, sampler key, stream, counter) (`group_seed`): the stream is the sampler's
start count (`sampler.starts`), the counter its groups made since that start, from 0. The prompt is the task's
draw with a `random.Random(seed)` (`seeded_prompt`); completion j samples with `completion_seeds(seed, G)[j]`.

Sampling is inverse-CDF at the run's temperature T: token_t is the first index v of the vocabulary (in id order)
whose cumulative probability under softmax(z / T) reaches u_t, a uniform from a counter-based hash of (completion
seed, position t) (`uniforms`; the same number on any device and in any batch): exactly a sample of
softmax(z / T), the distribution the behaviour log-probs describe, drawn by the sampler (`sampler.seeded`) and
replayed by the learner from its own logits (`model.replay`: u_t must lie in the token's interval
[CDF below it, CDF below it + p(token)], within a tolerance). One hash per position, not one per position and
vocabulary entry as Gumbel-max needs: on CPU a hash of the whole vocabulary cost 7x the lm_head's own
projection (bench/draw-check).

The hash is 32-bit arithmetic on int64 tensors that never leaves int64's range (products split into 16-bit
halves): a lowbias32 mixer (Wellons' constants); two 32-bit words make a 53-bit uniform in float64.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import torch

DRAW_FORMAT = "swarmnode-draw/1"
_M32 = 0xFFFFFFFF
_C1, _C2 = 0x7FEB352D, 0x846CA68B  # lowbias32 multipliers
_GOLDEN = 0x9E3779B9


def group_seed(run_id: str, sampler_id: str, stream: int, counter: int) -> int:
    """A group's seed (63 bits): nothing in it its sampler can choose but which counter it sends."""
    key = f"{DRAW_FORMAT}\0{run_id}\0{sampler_id}\0{int(stream)}\0{int(counter)}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 1


def completion_seeds(seed: int, generations: int) -> list[int]:
    """The sampling seed of each of a group's `generations` completions (63 bits each)."""
    return [
        int.from_bytes(hashlib.sha256(f"{DRAW_FORMAT}:{seed}:{j}".encode()).digest()[:8], "big") >> 1
        for j in range(generations)
    ]


def seeded_prompt(task: Any, seed: int) -> Any:
    """The training prompt a group with `seed` answers: the task's draw of one prompt with `random.Random(seed)`."""
    return task.sample(1, random.Random(seed))[0]


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for x in [0, 2^32) without leaving int64's range."""
    lo = (x & 0xFFFF) * c
    hi = (((x >> 16) * c) & 0xFFFF) << 16
    return (lo + hi) & _M32


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (every input bit moves about half the output bits)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _C1)
    x = x ^ (x >> 15)
    x = _mul32(x, _C2)
    return x ^ (x >> 16)


def uniforms(seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """u in (0, 1) (float64) for each (completion seed, position) pair of the equal-shaped int64 tensors."""
    seeds, positions = seeds.long(), positions.long()
    h = _mix((seeds & _M32) ^ _mix(((seeds >> 32) & _M32) ^ _GOLDEN))
    a = _mix(h ^ _mix(positions & _M32))
    b = _mix(a ^ _GOLDEN)
    return ((a << 21) + (b >> 11)).double().add_(0.5).mul_(2.0**-53)


def draw_tokens(scaled_logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The inverse-CDF draw [N] of each row of `scaled_logits` [N, V] (logits / T) for the uniforms `u` [N]: the
    first index whose cumulative probability (float64, vocabulary in id order) reaches u."""
    cdf = torch.softmax(scaled_logits.double(), dim=-1).cumsum(dim=-1)
    picked = torch.searchsorted(cdf, u.to(cdf.device, torch.float64)[:, None]).squeeze(1)
    return picked.clamp(max=scaled_logits.shape[-1] - 1)
