"""TextRolloutGroup (SAPO mode's record): round trips, strict validation, a decoder that only raises InvalidRecord."""

from __future__ import annotations

import hashlib
import math

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmnode.identity import Identity
from swarmnode.protocol.codec import InvalidRecord, pack
from swarmnode.protocol.text_rollout import TextRolloutGroup, TextRolloutLimits

IDENTITY = Identity.generate()
OTHER = Identity.generate()
LIMITS = TextRolloutLimits(max_generations=8, max_completion_chars=32, max_prompt_chars=64, max_bytes=64 * 1024)
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def groups(draw):
    g = draw(st.integers(1, LIMITS.max_generations))
    return TextRolloutGroup.create(
        identity=IDENTITY,
        run_id=draw(st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True)),
        prompt_id=draw(st.text(min_size=1, max_size=40)),
        prompt_text=draw(st.text(min_size=1, max_size=64)),
        completions=[draw(st.text(max_size=32)) for _ in range(g)],
        finished=[draw(st.booleans()) for _ in range(g)],
        rewards=[draw(st.floats(-1e3, 1e3)) for _ in range(g)],
        seq_logprobs=[draw(st.floats(-1e4, 0.0)) for _ in range(g)],
        temperature=draw(st.floats(0.05, 5.0)),
        model_id=draw(st.text(min_size=1, max_size=40)),
    )


def _example() -> TextRolloutGroup:
    return TextRolloutGroup.create(
        identity=IDENTITY,
        run_id="run",
        prompt_id="add:3:5",
        prompt_text="3+5=",
        completions=["8", "71"],
        finished=[True, False],
        rewards=[1.0, 0.1],
        seq_logprobs=[-0.6, -4.2],
        temperature=1.0,
        model_id="builtin:tiny#abc",
    )


@SETTINGS
@given(groups())
def test_round_trip(group):
    assert TextRolloutGroup.decode(group.encode(), LIMITS) == group


def _rejects(data: bytes, reason: str | None = None, limits: TextRolloutLimits = LIMITS) -> None:
    with pytest.raises(InvalidRecord) as info:
        TextRolloutGroup.decode(data, limits)
    assert str(info.value)
    if reason:
        assert reason in str(info.value), str(info.value)


def _wire(group: TextRolloutGroup) -> dict:
    return msgpack.unpackb(group.encode(), raw=False)


def _resigned(obj: dict, identity: Identity = IDENTITY) -> bytes:
    """Re-hash and re-sign a tampered record, so only the field check itself can reject it."""
    content = {k: v for k, v in obj.items() if k not in ("group_id", "signature")}
    obj = dict(obj, group_id=hashlib.sha256(pack(content)).hexdigest())
    obj["signature"] = identity.sign(pack({k: v for k, v in obj.items() if k != "signature"}))
    return pack(obj)


@pytest.mark.parametrize(
    "change,reason",
    [
        (lambda o: o.update(completions=[]), "empty"),
        (lambda o: o.update(completions=["1"] * 9, finished=[True] * 9), "limit 8"),
        (lambda o: o.update(completions=["x" * 33, "1"]), "at most 32 characters"),
        (lambda o: o.update(completions=[[1], "1"]), "must be text"),
        (lambda o: o.update(finished=[True]), "finished must hold 2"),
        (lambda o: o.update(finished=[1, 0]), "finished must hold 2"),
        (lambda o: o.update(rewards=[1.0]), "rewards has 1 entries"),
        (lambda o: o.update(rewards=[math.nan, 0.0]), "not a finite number"),
        (lambda o: o.update(rewards=[True, 0.0]), "not a finite number"),
        (lambda o: o.update(seq_logprobs=[0.5, -1.0]), "positive"),
        (lambda o: o.update(seq_logprobs=[-math.inf, -1.0]), "not a finite number"),
        (lambda o: o.update(temperature=0.0), "temperature"),
        (lambda o: o.update(prompt_text=""), "prompt_text"),
        (lambda o: o.update(prompt_text="p" * 65), "prompt_text"),
        (lambda o: o.update(model_id=""), "model_id"),
        (lambda o: o.update(kind="rollout"), "kind"),
        (lambda o: o.update(v=2), "'v'"),
        (lambda o: o.update(extra=1), "unknown field 'extra'"),
        (lambda o: o.pop("sampler_id"), "missing field 'sampler_id'"),
    ],
)
def test_invalid_fields_are_rejected_with_reason(change, reason):
    obj = _wire(_example())
    change(obj)
    _rejects(_resigned(obj), reason)


def test_forged_records_are_rejected():
    obj = _wire(_example())
    obj["rewards"] = [1.0, 1.0]  # inflate a claim, keep the old id and signature
    _rejects(pack(obj), "group_id does not match")
    obj = _wire(_example())
    obj["completions"] = ["8", "8"]
    _rejects(_resigned(obj, OTHER), "bad signature")  # signed by someone else while claiming IDENTITY
    obj = _wire(_example())
    obj["sampler_id"] = OTHER.peer_id  # claims to be another peer
    _rejects(_resigned(obj), "bad signature")


def test_size_limit_and_garbage():
    data = _example().encode()
    _rejects(data, "exceeds the limit", TextRolloutLimits(max_bytes=len(data) - 1))
    _rejects(b"", "not valid msgpack")
    _rejects(msgpack.packb([1]), "top level must be a map")


@SETTINGS
@given(groups(), st.data())
def test_mutations_and_truncations_never_crash(group, data):
    raw = bytearray(group.encode())
    cut = data.draw(st.integers(0, len(raw) - 1))
    _rejects(bytes(raw[:cut]))
    for _ in range(data.draw(st.integers(1, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    try:
        TextRolloutGroup.decode(bytes(raw), LIMITS)
    except InvalidRecord as exc:
        assert str(exc)


@SETTINGS
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_never_crash(blob):
    _rejects(blob)
