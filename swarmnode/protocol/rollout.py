"""RolloutGroup: G completions of one prompt, with behaviour log-probs and the policy version that made them.

Wire format (msgpack map, strict: unknown or missing fields are rejected):
  kind "rollout", v 1, run_id, group_id (sha256 hex of the canonical content), prompt_id, prompt_tokens,
  completions (lists of token ids), logprobs (one float32 little-endian byte string per completion),
  temperature, rewards, policy_version, lineage, sampler_id, created_at, signature (Ed25519 by sampler_id).
Log-probs are stored as float32: `create` rounds them so the in-memory record equals the decoded one.
`decode` raises only `InvalidRecord`, with the reason.

Plausibility, beyond types and sizes (one group must not be able to poison a learner's step):
- every behaviour log-prob lies in [`RolloutLimits.logprob_floor`, 0]. The floor is -(ln V + 40): an honest
  sampler draws a token whose probability is below e^floor with probability at most V * e^floor = e^-40 per
  token, while a forged -1e30 would overflow the learner's importance weights;
- the temperature lies in the run's bounds (`from_config`: half to twice the run's sampler temperature), so
  1e-30 (logits divided into infinities) is refused;
- the decoder counts arrays/maps while decoding and stops at the first excess, so a frame of millions of
  empty arrays costs microseconds (the learner checks prompt ids against the task's training split).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from swarmnode.identity import Identity
from swarmnode.protocol.codec import (
    MAX_VERSION,
    InvalidRecord,
    SignedGroup,
    bytes_field,
    check_content,
    decode_guarded,
    float_field,
    int_field,
    list_field,
    str_field,
    unpack_record,
)

KIND = "rollout"
WIRE_VERSION = 1
MAX_ID_CHARS = 128
MAX_TEMPERATURE = 10.0  # the sampler config's own upper bound
MIN_TEMPERATURE = 0.05
MAX_ABS_REWARD = 1e6
LOGPROB_MARGIN = 40.0  # nats below -ln(vocab) an honest sampled token never reaches (chance e^-40 per token)
_SCALAR_FIELDS_SLACK = 8  # arrays/maps beyond the per-completion ones: top-level map, prompt, lists of lists
_WIRE_FIELDS = frozenset(
    "kind v run_id group_id prompt_id prompt_tokens completions logprobs temperature rewards policy_version "
    "lineage sampler_id created_at signature draw".split()
)
MAX_DRAW_STREAM = (1 << 31) - 1
MAX_DRAW_COUNTER = (1 << 53) - 1


@dataclass(frozen=True)
class RolloutLimits:
    """What a receiver accepts; anything beyond is rejected before it reaches the buffer."""

    vocab_size: int
    max_generations: int = 64
    max_completion_tokens: int = 4096
    max_prompt_tokens: int = 4096
    max_bytes: int = 8 * 1024 * 1024
    min_temperature: float = MIN_TEMPERATURE
    max_temperature: float = MAX_TEMPERATURE

    @property
    def logprob_floor(self) -> float:
        """The lowest per-token behaviour log-prob accepted: -(ln V + LOGPROB_MARGIN)."""
        return -(math.log(max(2, self.vocab_size)) + LOGPROB_MARGIN)

    @property
    def max_array_len(self) -> int:
        """The longest array a valid record holds (a completion, the prompt, or the list of completions)."""
        return max(self.max_generations, self.max_completion_tokens, self.max_prompt_tokens)

    @property
    def max_containers(self) -> int:
        """Arrays and maps a valid record holds at most: one per completion plus a few."""
        return self.max_generations + _SCALAR_FIELDS_SLACK

    @classmethod
    def from_config(cls, cfg, vocab_size: int) -> RolloutLimits:
        """Limits of a run: G, lengths and message size from the node config (a NodeConfig); temperatures
        within half to twice the run's sampler temperature."""
        temperature = cfg.sampler.temperature
        return cls(
            vocab_size=vocab_size,
            max_generations=cfg.sampler.num_generations,
            max_completion_tokens=cfg.sampler.max_completion_length,
            max_prompt_tokens=cfg.sampler.max_prompt_length,
            max_bytes=cfg.network.max_message_bytes,
            min_temperature=max(MIN_TEMPERATURE, temperature / 2),
            max_temperature=min(MAX_TEMPERATURE, temperature * 2),
        )


def _f32(values) -> list[float]:
    return np.asarray(values, dtype=np.float32).astype(np.float64).tolist()


def _lp_bytes(values: list[float]) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def _plausible_logprobs(raw_lps: list, floor: float, vocab: int) -> list[list[float]]:
    """Each completion's float32 log-probs as floats; InvalidRecord naming the first bad one when any is not
    finite, positive or below `floor`. Checked on all of them at once (per completion it was a tenth of a
    learner's decode)."""
    values = np.frombuffer(b"".join(raw_lps), dtype="<f4")
    ends = np.cumsum([len(raw) // 4 for raw in raw_lps]).tolist()
    starts = [0, *ends[:-1]]
    sane = np.isfinite(values) & (values <= 0)
    plausible = sane & (values >= floor)
    if not plausible.all():  # the completion holding the first bad value is the one named
        i = int(np.searchsorted(ends, int(np.argmin(plausible)), side="right"))
        if not sane[starts[i] : ends[i]].all():
            raise InvalidRecord(f"logprobs[{i}] holds a non-finite or positive log-prob")
        raise InvalidRecord(
            f"logprobs[{i}] holds {float(values[starts[i] : ends[i]].min()):.3g}, below the "
            f"plausible floor {floor:.1f} for a vocabulary of {vocab}"
        )
    flat = values.astype(np.float64).tolist()
    return [flat[a:b] for a, b in zip(starts, ends)]


@dataclass
class RolloutGroup(SignedGroup):
    """One prompt's G completions as generated by one sampler at one policy version (see module docstring)."""

    run_id: str
    group_id: str
    prompt_id: str
    prompt_tokens: list[int]
    completions: list[list[int]]
    logprobs: list[list[float]]
    temperature: float
    rewards: list[float]
    policy_version: int
    lineage: str
    sampler_id: str
    created_at: float
    signature: bytes
    draw: tuple[int, int, int] | None = None  # (stream, counter, replayable) of a seeded group

    @property
    def num_generations(self) -> int:
        return len(self.completions)

    def _content(self) -> dict:
        """Every wire field except group_id and signature: what the group id hashes."""
        content = {
            "kind": KIND,
            "v": WIRE_VERSION,
            "run_id": self.run_id,
            "prompt_id": self.prompt_id,
            "prompt_tokens": list(self.prompt_tokens),
            "completions": [list(c) for c in self.completions],
            "logprobs": [_lp_bytes(lp) for lp in self.logprobs],
            "temperature": float(self.temperature),
            "rewards": [float(r) for r in self.rewards],
            "policy_version": int(self.policy_version),
            "lineage": self.lineage,
            "sampler_id": self.sampler_id,
            "created_at": float(self.created_at),
        }
        if self.draw is not None:  # absent from an unseeded group: its bytes are what they were before draws
            content["draw"] = [int(x) for x in self.draw]
        return content

    @classmethod
    def create(
        cls,
        *,
        identity: Identity,
        run_id: str,
        prompt_id: str,
        prompt_tokens: list[int],
        completions: list[list[int]],
        logprobs: list[list[float]],
        temperature: float,
        rewards: list[float],
        policy_version: int,
        lineage: str,
        created_at: float | None = None,
        draw: tuple[int, int, int] | None = None,
    ) -> RolloutGroup:
        """A signed group with its content-hash id (log-probs rounded to float32, as on the wire); `draw`: a seeded
        group's (stream, counter, replayable)."""
        group = cls(
            run_id=run_id,
            group_id="",
            prompt_id=prompt_id,
            prompt_tokens=[int(t) for t in prompt_tokens],
            completions=[[int(t) for t in c] for c in completions],
            logprobs=[_f32(lp) for lp in logprobs],
            temperature=float(temperature),
            rewards=[float(r) for r in rewards],
            policy_version=int(policy_version),
            lineage=lineage,
            sampler_id=identity.peer_id,
            created_at=time.time() if created_at is None else float(created_at),
            signature=b"",
            draw=None if draw is None else (int(draw[0]), int(draw[1]), int(draw[2])),
        )
        return group._seal(identity)

    @classmethod
    def decode(cls, data: bytes, limits: RolloutLimits) -> RolloutGroup:
        """Parse, validate and verify a wire record; raises only InvalidRecord (with the reason)."""
        return decode_guarded(lambda: cls._decode(data, limits), "rollout group")

    @classmethod
    def _decode(cls, data: bytes, limits: RolloutLimits) -> RolloutGroup:
        obj = unpack_record(
            data,
            limits.max_bytes,
            KIND,
            WIRE_VERSION,
            _WIRE_FIELDS,
            max_array_len=limits.max_array_len,
            max_containers=limits.max_containers,
            max_map_len=2 * len(_WIRE_FIELDS),
        )
        vocab = limits.vocab_size

        def token_list(name: str, value, lo: int, hi: int) -> list[int]:
            if not isinstance(value, (list, tuple)):
                raise InvalidRecord(f"{name} must be a list of token ids")
            if not lo <= len(value) <= hi:
                raise InvalidRecord(f"{name} has {len(value)} tokens, allowed [{lo}, {hi}]")
            for t in value:
                if type(t) is not int or not 0 <= t < vocab:
                    raise InvalidRecord(f"{name} holds {t!r}, not a token id in [0, {vocab})")
            return list(value)

        prompt_tokens = token_list("prompt_tokens", obj.get("prompt_tokens"), 1, limits.max_prompt_tokens)
        completions = list_field(obj, "completions", limits.max_generations)
        if not completions:
            raise InvalidRecord("field 'completions' is empty")
        completions = [
            token_list(f"completions[{i}]", c, 1, limits.max_completion_tokens) for i, c in enumerate(completions)
        ]
        g = len(completions)
        raw_lps = list_field(obj, "logprobs", limits.max_generations)
        if len(raw_lps) != g:
            raise InvalidRecord(f"logprobs has {len(raw_lps)} entries for {g} completions")
        for i, (raw, comp) in enumerate(zip(raw_lps, completions)):
            if not isinstance(raw, (bytes, bytearray)) or len(raw) != 4 * len(comp):
                raise InvalidRecord(f"logprobs[{i}] must be {4 * len(comp)} bytes of float32")
        logprobs = _plausible_logprobs(raw_lps, limits.logprob_floor, vocab)
        rewards = list_field(obj, "rewards", limits.max_generations)
        if len(rewards) != g:
            raise InvalidRecord(f"rewards has {len(rewards)} entries for {g} completions")
        for r in rewards:
            if type(r) not in (int, float) or not math.isfinite(r) or abs(r) > MAX_ABS_REWARD:
                raise InvalidRecord(f"reward {r!r} is not a finite number within ±{MAX_ABS_REWARD:g}")
        temperature = float_field(obj, "temperature", limits.min_temperature, limits.max_temperature)
        group = cls(
            run_id=str_field(obj, "run_id", 64, 1),
            group_id=str_field(obj, "group_id", 64, 64),
            prompt_id=str_field(obj, "prompt_id", 256, 1),
            prompt_tokens=prompt_tokens,
            completions=completions,
            logprobs=logprobs,
            temperature=temperature,
            rewards=[float(r) for r in rewards],
            policy_version=int_field(obj, "policy_version", 0, MAX_VERSION),
            lineage=str_field(obj, "lineage", MAX_ID_CHARS),
            sampler_id=str_field(obj, "sampler_id", MAX_ID_CHARS, 1),
            created_at=float_field(obj, "created_at", 0.0, 1e11),
            signature=bytes_field(obj, "signature", 64, exact=64),
            draw=_draw_field(obj),
        )
        check_content(group._content(), "group_id", group.group_id, group.sampler_id, group.signature)
        return group


def _draw_field(obj: dict) -> tuple[int, int, int] | None:
    """A seeded group's [stream, counter, replayable], or None when the field is absent."""
    if "draw" not in obj:
        return None
    value = obj["draw"]
    if not isinstance(value, (list, tuple)) or len(value) != 3 or any(type(x) is not int for x in value):
        raise InvalidRecord("field 'draw' must be [stream, counter, replayable] integers")
    stream, counter, replayable = value
    if not (0 <= stream <= MAX_DRAW_STREAM and 0 <= counter <= MAX_DRAW_COUNTER and replayable in (0, 1)):
        raise InvalidRecord(f"field 'draw' out of range: {list(value)}")
    return stream, counter, replayable
