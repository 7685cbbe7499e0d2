"""RolloutGroup: round trips, strict validation, and a decoder that only ever raises InvalidRecord."""

from __future__ import annotations

import hashlib
import math

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmnode.identity import Identity
from swarmnode.protocol.codec import InvalidRecord, pack
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits

IDENTITY = Identity.generate()
OTHER = Identity.generate()
LIMITS = RolloutLimits(
    vocab_size=128, max_generations=8, max_completion_tokens=16, max_prompt_tokens=32, max_bytes=64 * 1024
)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

tokens = st.integers(0, LIMITS.vocab_size - 1)
logprob = st.floats(-40.0, 0.0, allow_nan=False, width=32)  # floor for V=128: -44.85


@st.composite
def groups(draw):
    g = draw(st.integers(1, LIMITS.max_generations))
    completions = [draw(st.lists(tokens, min_size=1, max_size=LIMITS.max_completion_tokens)) for _ in range(g)]
    return RolloutGroup.create(
        identity=IDENTITY,
        run_id=draw(st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True)),
        prompt_id=draw(st.text(min_size=1, max_size=40)),
        prompt_tokens=draw(st.lists(tokens, min_size=1, max_size=LIMITS.max_prompt_tokens)),
        completions=completions,
        logprobs=[[draw(logprob) for _ in c] for c in completions],
        temperature=draw(st.floats(0.05, 5.0)),
        rewards=[draw(st.floats(-1e3, 1e3, allow_nan=False)) for _ in range(g)],
        policy_version=draw(st.integers(0, 2**40)),
        lineage=draw(st.text(max_size=20)),
    )


def _example() -> RolloutGroup:
    return RolloutGroup.create(
        identity=IDENTITY,
        run_id="run",
        prompt_id="add:3:5",
        prompt_tokens=[7, 76, 9, 84],
        completions=[[12, 1], [11, 5, 1]],
        logprobs=[[-0.5, -0.1], [-2.0, -0.3, -0.01]],
        temperature=1.0,
        rewards=[1.0, 0.2],
        policy_version=7,
        lineage="L1",
    )


@SETTINGS
@given(groups())
def test_round_trip(group):
    assert RolloutGroup.decode(group.encode(), LIMITS) == group


def test_create_rounds_logprobs_to_float32_and_ids_are_content_hashes():
    a = _example()
    assert a.logprobs[1][2] == pytest.approx(-0.01, abs=1e-7) and a.logprobs[1][2] != -0.01
    b = RolloutGroup.create(**{**_common(a), "created_at": a.created_at})
    assert b.group_id == a.group_id  # same content, same id
    c = RolloutGroup.create(**{**_common(a), "created_at": a.created_at, "policy_version": 8})
    assert c.group_id != a.group_id


def _common(g: RolloutGroup) -> dict:
    return dict(
        identity=IDENTITY,
        run_id=g.run_id,
        prompt_id=g.prompt_id,
        prompt_tokens=g.prompt_tokens,
        completions=g.completions,
        logprobs=g.logprobs,
        temperature=g.temperature,
        rewards=g.rewards,
        policy_version=g.policy_version,
        lineage=g.lineage,
    )


def _rejects(data: bytes, reason: str | None = None, limits: RolloutLimits = LIMITS) -> str:
    with pytest.raises(InvalidRecord) as info:
        RolloutGroup.decode(data, limits)
    message = str(info.value)
    assert message
    if reason:
        assert reason in message, message
    return message


def _wire(group: RolloutGroup) -> dict:
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
        (lambda o: o.update(prompt_tokens=[7, 128]), "not a token id"),
        (lambda o: o.update(prompt_tokens=[-1]), "not a token id"),
        (lambda o: o.update(prompt_tokens=[]), "prompt_tokens has 0 tokens"),
        (lambda o: o.update(prompt_tokens=[1] * 33), "33 exceeds max_array_len"),
        (lambda o: o.update(prompt_tokens=[True]), "not a token id"),
        (lambda o: o.update(completions=[[1] * 17, [1]]), "completions[0] has 17 tokens"),
        (lambda o: o.update(completions=[]), "empty"),
        (lambda o: o.update(completions=[[1]] * 9), "limit 8"),
        (lambda o: o["completions"].__setitem__(1, [1, 2]), "logprobs[1] must be 8 bytes"),
        (lambda o: o["logprobs"].pop(), "logprobs has 1 entries for 2"),
        (lambda o: o["logprobs"].__setitem__(0, bytes(3)), "logprobs[0] must be 8 bytes"),
        (lambda o: o["logprobs"].__setitem__(0, b"\x00\x00\xc0\x7f" * 2), "non-finite"),  # NaN
        (lambda o: o["logprobs"].__setitem__(0, b"\x00\x00\x80\x3f" * 2), "positive"),  # +1.0
        (lambda o: o["logprobs"].__setitem__(0, [-0.5, -0.1]), "float32"),
        (lambda o: o.update(rewards=[1.0]), "rewards has 1 entries"),
        (lambda o: o.update(rewards=[math.inf, 0.0]), "not a finite number"),
        (lambda o: o.update(rewards=["1", 0.0]), "not a finite number"),
        (lambda o: o.update(temperature=0.0), "temperature"),
        (lambda o: o.update(temperature=-1.0), "temperature"),
        (lambda o: o.update(temperature=math.nan), "temperature"),
        (lambda o: o.update(temperature=1e-30), "temperature"),
        (lambda o: o.update(temperature=11.0), "temperature"),
        (lambda o: o["logprobs"].__setitem__(0, np.asarray([-1e30, -0.1], "<f4").tobytes()), "plausible floor"),
        (lambda o: o["logprobs"].__setitem__(0, np.asarray([-45.0, -0.1], "<f4").tobytes()), "plausible floor"),
        (lambda o: o.update(policy_version=-1), "policy_version"),
        (lambda o: o.update(policy_version=1.5), "policy_version"),
        (lambda o: o.update(run_id=""), "run_id"),
        (lambda o: o.update(created_at=math.inf), "created_at"),
        (lambda o: o.update(kind="peer"), "kind"),
        (lambda o: o.update(v=2), "'v'"),
        (lambda o: o.update(extra=1), "unknown field 'extra'"),
        (lambda o: o.pop("lineage"), "missing field 'lineage'"),
    ],
)
def test_invalid_fields_are_rejected_with_reason(change, reason):
    obj = _wire(_example())
    change(obj)
    _rejects(_resigned(obj), reason)


def test_forged_group_id_and_signature_are_rejected():
    obj = _wire(_example())
    obj["rewards"] = [1.0, 1.0]  # inflate a reward, keep the old id and signature
    _rejects(pack(obj), "group_id does not match")
    obj = _wire(_example())
    obj["rewards"] = [1.0, 1.0]
    _rejects(_resigned(obj, OTHER), "bad signature")  # re-signed by someone else, still claiming IDENTITY
    obj = _wire(_example())
    obj["sampler_id"] = OTHER.peer_id  # claims another sampler, same content
    _rejects(_resigned(obj), "bad signature")
    obj = _wire(_example())
    obj["signature"] = bytes(64)
    _rejects(pack(obj), "bad signature")


def test_size_limit_and_non_map_inputs():
    data = _example().encode()
    _rejects(data, "exceeds the limit", RolloutLimits(vocab_size=128, max_bytes=len(data) - 1))
    _rejects(b"", "not valid msgpack")
    _rejects(msgpack.packb([1, 2]), "top level must be a map")
    _rejects(b"\xc1", "not valid msgpack")
    _rejects(bytes(10**6), "exceeds the limit")


def test_floor_follows_the_vocabulary_and_temperature_the_run():
    assert LIMITS.logprob_floor == pytest.approx(-(math.log(128) + 40))
    assert RolloutLimits(vocab_size=151_936).logprob_floor < LIMITS.logprob_floor
    obj = _wire(_example())
    obj["logprobs"][0] = np.asarray([-44.0, -0.1], "<f4").tobytes()  # above the floor for V=128
    assert RolloutGroup.decode(_resigned(obj), LIMITS).logprobs[0][0] == pytest.approx(-44.0)
    from swarmnode.config import NodeConfig

    run = RolloutLimits.from_config(NodeConfig.model_validate({"sampler": {"temperature": 0.6}}), vocab_size=128)
    assert (run.min_temperature, run.max_temperature) == pytest.approx((0.3, 1.2))
    obj = _wire(_example())
    obj["temperature"] = 2.0  # fine by the defaults, outside this run's bounds
    _rejects(_resigned(obj), "temperature", run)


@pytest.mark.parametrize(
    "payload",
    [
        {"completions": [[]] * (8 << 20)},  # 8 M empty arrays: the frame of the attack campaign
        {"completions": [[[]] * 4000] * 2000},  # nested: every array short, millions in all
        {"prompt_tokens": [{}] * 100_000},  # maps count too
    ],
)
def test_millions_of_tiny_containers_are_refused_at_the_first_excess(payload):
    data = msgpack.packb(payload)
    limits = RolloutLimits(vocab_size=128, max_bytes=len(data) + 1)
    import tracemalloc

    tracemalloc.start()
    assert any(r in _rejects(data, None, limits) for r in ("exceeds max_array_len", "arrays/maps"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20  # the whole frame decoded would be ~1 GB of lists; refused well before


def test_vocab_limit_applies():
    _rejects(_example().encode(), "not a token id", RolloutLimits(vocab_size=50))


@settings(SETTINGS, max_examples=250)
@given(groups(), st.data())
def test_random_mutations_never_crash(group, data):
    """8 independently mutated copies per drawn group: ~2,000 corrupted records per run."""
    original = group.encode()
    for _ in range(8):
        raw = bytearray(original)
        for _ in range(data.draw(st.integers(1, 8))):
            pos = data.draw(st.integers(0, len(raw) - 1))
            op = data.draw(st.sampled_from(["flip", "set", "insert", "delete"]))
            if op == "flip":
                raw[pos] ^= 1 << data.draw(st.integers(0, 7))
            elif op == "set":
                raw[pos] = data.draw(st.integers(0, 255))
            elif op == "insert":
                raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=16))
            elif len(raw) > 1:
                del raw[pos]
        if bytes(raw) != original:
            _rejects(bytes(raw))


@SETTINGS
@given(groups(), st.data())
def test_truncations_never_crash(group, data):
    raw = group.encode()
    cut = data.draw(st.integers(0, len(raw) - 1))
    _rejects(raw[:cut])
    _rejects(raw + data.draw(st.binary(min_size=1, max_size=64)))


@SETTINGS
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_never_crash(blob):
    _rejects(blob)


json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=16),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@SETTINGS
@given(st.data())
def test_well_formed_msgpack_with_wrong_values_never_crashes(data):
    original = _example()
    obj = _wire(original)
    resign = data.draw(st.booleans())  # re-signing rewrites group_id and signature, so mutate only content then
    keys = sorted(k for k in obj if not (resign and k in ("group_id", "signature")))
    for _ in range(data.draw(st.integers(1, 3))):
        obj[data.draw(st.sampled_from(keys))] = data.draw(json_like)
    raw = _resigned(obj) if resign else pack(obj)
    try:
        group = RolloutGroup.decode(raw, LIMITS)
    except InvalidRecord as exc:
        assert str(exc)
    else:  # a re-signed record may still be valid (e.g. another version number): then it is canonical;
        # an unsigned edit may only pass if it changed nothing the signature covers (e.g. 1 for 1.0)
        assert (resign and group.encode() == raw) or group == original


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4))
def test_oversized_fields_rejected(factor):
    obj = _wire(_example())
    obj["completions"] = [[1] * (LIMITS.max_completion_tokens * 50 * factor)] * 2
    obj["logprobs"] = [bytes(4 * len(obj["completions"][0]))] * 2
    _rejects(_resigned(obj))  # over max_bytes or over max_completion_tokens, whichever is seen first
