"""TextRolloutGroup: one prompt's G completions shared as TEXT between nodes that each train their own policy.

The SAPO mode's record. Only text crosses the network, so nodes of
different sizes and tokenizers can use each other's rollouts: the receiver re-tokenises the text with its own
tokenizer and re-scores it with its own task; the sender's rewards are a claim it checks (and counts lies).

Wire format (msgpack map, strict: unknown or missing fields are rejected):
  kind "text-rollout", v 1, run_id, group_id (sha256 hex of the canonical content), prompt_id, prompt_text,
  completions (texts), finished (one bool per completion: it ended with the sender's EOS, not at its length
  cap), rewards (as the sender claims), seq_logprobs (the sender's log-likelihood of each completion under the
  policy that sampled it: the sum of its token log-probs at `temperature`), temperature, model_id (what made
  the text: a name and a short content hash), sampler_id, created_at, signature (Ed25519 by sampler_id).
`decode` raises only `InvalidRecord`, with the reason.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from swarmnode.identity import Identity
from swarmnode.protocol.codec import (
    InvalidRecord,
    SignedGroup,
    bytes_field,
    check_content,
    decode_guarded,
    float_field,
    list_field,
    str_field,
    unpack_record,
)

KIND = "text-rollout"
WIRE_VERSION = 1
MAX_ID_CHARS = 128
MAX_TEMPERATURE = 100.0
MAX_ABS_REWARD = 1e6
MAX_ABS_LOGPROB = 1e7  # a sequence log-likelihood: sum over up to ~1e5 tokens of per-token log-probs
_WIRE_FIELDS = frozenset(
    "kind v run_id group_id prompt_id prompt_text completions finished rewards seq_logprobs temperature "
    "model_id sampler_id created_at signature".split()
)


@dataclass(frozen=True)
class TextRolloutLimits:
    """What a receiver accepts; anything beyond is rejected before it reaches the pool."""

    max_generations: int = 64
    max_completion_chars: int = 16384
    max_prompt_chars: int = 16384
    max_bytes: int = 4 * 1024 * 1024

    @classmethod
    def from_config(cls, cfg) -> TextRolloutLimits:
        """Limits of a run from a NodeConfig: G, the text lengths of its `sapo` section, the message cap."""
        return cls(
            max_generations=cfg.sampler.num_generations,
            max_completion_chars=cfg.sapo.max_completion_chars,
            max_prompt_chars=cfg.sapo.max_prompt_chars,
            max_bytes=cfg.network.max_message_bytes,
        )


@dataclass
class TextRolloutGroup(SignedGroup):
    """One prompt's G completions as text, with the sender's claimed rewards and likelihoods (see module doc)."""

    run_id: str
    group_id: str
    prompt_id: str
    prompt_text: str
    completions: list[str]
    finished: list[bool]
    rewards: list[float]
    seq_logprobs: list[float]
    temperature: float
    model_id: str
    sampler_id: str
    created_at: float
    signature: bytes

    @property
    def num_generations(self) -> int:
        return len(self.completions)

    def _content(self) -> dict:
        """Every wire field except group_id and signature: what the group id hashes."""
        return {
            "kind": KIND,
            "v": WIRE_VERSION,
            "run_id": self.run_id,
            "prompt_id": self.prompt_id,
            "prompt_text": self.prompt_text,
            "completions": list(self.completions),
            "finished": [bool(f) for f in self.finished],
            "rewards": [float(r) for r in self.rewards],
            "seq_logprobs": [float(x) for x in self.seq_logprobs],
            "temperature": float(self.temperature),
            "model_id": self.model_id,
            "sampler_id": self.sampler_id,
            "created_at": float(self.created_at),
        }

    @classmethod
    def create(
        cls,
        *,
        identity: Identity,
        run_id: str,
        prompt_id: str,
        prompt_text: str,
        completions: list[str],
        finished: list[bool],
        rewards: list[float],
        seq_logprobs: list[float],
        temperature: float,
        model_id: str,
        created_at: float | None = None,
    ) -> TextRolloutGroup:
        """A signed group with its content-hash id."""
        group = cls(
            run_id=run_id,
            group_id="",
            prompt_id=prompt_id,
            prompt_text=prompt_text,
            completions=[str(c) for c in completions],
            finished=[bool(f) for f in finished],
            rewards=[float(r) for r in rewards],
            seq_logprobs=[float(x) for x in seq_logprobs],
            temperature=float(temperature),
            model_id=model_id,
            sampler_id=identity.peer_id,
            created_at=time.time() if created_at is None else float(created_at),
            signature=b"",
        )
        return group._seal(identity)

    @classmethod
    def decode(cls, data: bytes, limits: TextRolloutLimits) -> TextRolloutGroup:
        """Parse, validate and verify a wire record; raises only InvalidRecord (with the reason)."""
        return decode_guarded(lambda: cls._decode(data, limits), "text rollout group")

    @classmethod
    def _decode(cls, data: bytes, limits: TextRolloutLimits) -> TextRolloutGroup:
        obj = unpack_record(data, limits.max_bytes, KIND, WIRE_VERSION, _WIRE_FIELDS)

        def text(value, where: str) -> str:
            if not isinstance(value, str) or len(value) > limits.max_completion_chars:
                raise InvalidRecord(f"{where} must be text of at most {limits.max_completion_chars} characters")
            return value

        completions = list_field(obj, "completions", limits.max_generations)
        if not completions:
            raise InvalidRecord("field 'completions' is empty")
        completions = [text(c, f"completions[{i}]") for i, c in enumerate(completions)]
        g = len(completions)
        finished = list_field(obj, "finished", limits.max_generations)
        if len(finished) != g or any(type(f) is not bool for f in finished):
            raise InvalidRecord(f"finished must hold {g} booleans")
        rewards = _numbers(obj, "rewards", g, MAX_ABS_REWARD)
        seq_logprobs = _numbers(obj, "seq_logprobs", g, MAX_ABS_LOGPROB)
        if any(x > 0 for x in seq_logprobs):
            raise InvalidRecord("seq_logprobs holds a positive log-likelihood")
        temperature = float_field(obj, "temperature", 0.0, MAX_TEMPERATURE)
        if temperature <= 0:
            raise InvalidRecord("field 'temperature' must be > 0")
        group = cls(
            run_id=str_field(obj, "run_id", 64, 1),
            group_id=str_field(obj, "group_id", 64, 64),
            prompt_id=str_field(obj, "prompt_id", 256, 1),
            prompt_text=str_field(obj, "prompt_text", limits.max_prompt_chars, 1),
            completions=completions,
            finished=list(finished),
            rewards=rewards,
            seq_logprobs=seq_logprobs,
            temperature=temperature,
            model_id=str_field(obj, "model_id", MAX_ID_CHARS, 1),
            sampler_id=str_field(obj, "sampler_id", MAX_ID_CHARS, 1),
            created_at=float_field(obj, "created_at", 0.0, 1e11),
            signature=bytes_field(obj, "signature", 64, exact=64),
        )
        check_content(group._content(), "group_id", group.group_id, group.sampler_id, group.signature)
        return group


def _numbers(obj: dict, name: str, count: int, bound: float) -> list[float]:
    values = list_field(obj, name, count)
    if len(values) != count:
        raise InvalidRecord(f"{name} has {len(values)} entries for {count} completions")
    for x in values:
        if type(x) not in (int, float) or not math.isfinite(x) or abs(x) > bound:
            raise InvalidRecord(f"{name} holds {x!r}, not a finite number within ±{bound:g}")
    return [float(x) for x in values]
