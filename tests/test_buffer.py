"""ReplayBuffer policy on real, signed RolloutGroups: dedup, staleness, quotas, eviction, draw order, counters."""

from __future__ import annotations

import itertools

import pytest

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.protocol.rollout import RolloutGroup

_ids = itertools.count()


@pytest.fixture(scope="module")
def senders():
    return [Identity.generate() for _ in range(3)]


def make_group(identity, version: int, lineage: str = "main") -> RolloutGroup:
    n = next(_ids)
    return RolloutGroup.create(
        identity=identity,
        run_id="r",
        prompt_id=f"p{n}",
        prompt_tokens=[5, 6],
        completions=[[7, 1], [8, 1]],
        logprobs=[[-0.5, -0.1], [-0.7, -0.2]],
        temperature=1.0,
        rewards=[1.0, 0.0],
        policy_version=version,
        lineage=lineage,
    )


def test_dedup_and_counters(senders):
    buf = ReplayBuffer(capacity=8, max_staleness=4)
    g = make_group(senders[0], 0)
    assert buf.add(g) == "ok"
    assert buf.add(g) == "duplicate"
    assert buf.draw(4) == [g]
    assert buf.add(g) == "duplicate", "a group already trained on must not come back"
    assert buf.stats()["counters"]["ok"] == 1 and buf.stats()["counters"]["duplicate"] == 2


def test_staleness_refused_and_aged_out(senders):
    buf = ReplayBuffer(capacity=16, max_staleness=2, version=5)
    assert buf.add(make_group(senders[0], 2)) == "stale"  # tau = 3
    assert buf.add(make_group(senders[0], 6)) == "future"
    keep, old = make_group(senders[0], 5), make_group(senders[1], 3)
    assert buf.add(keep) == "ok" and buf.add(old) == "ok"  # tau 0 and 2
    buf.set_version(6)  # old now has tau 3
    assert len(buf) == 1 and buf.draw(5) == [keep]
    s = buf.stats()
    assert s["counters"]["stale"] == 1 and s["counters"]["aged_out"] == 1 and s["counters"]["future"] == 1
    assert s["dropped_fraction"] == pytest.approx(2 / 4)


def test_per_sampler_quota(senders):
    buf = ReplayBuffer(capacity=10, max_staleness=10, per_sampler_quota=0.3)
    results = [buf.add(make_group(senders[0], 0)) for _ in range(6)]
    assert results == ["ok"] * 3 + ["quota"] * 3
    assert buf.add(make_group(senders[1], 0)) == "ok", "a flooding sender must not lock others out"
    buf.draw(2)  # drawing frees quota again
    assert buf.add(make_group(senders[0], 0)) == "ok"
    assert max(buf.stats()["per_sampler"].values()) <= 3


def test_bounded_and_evicts_stalest(senders):
    buf = ReplayBuffer(capacity=4, max_staleness=100, version=10)
    groups = [make_group(senders[i % 3], v) for i, v in enumerate([9, 3, 10, 7, 8, 10])]
    for g in groups:
        assert buf.add(g) == "ok"
        assert len(buf) <= 4
    assert sorted(g.policy_version for g in buf.draw(10)) == [8, 9, 10, 10] and len(buf) == 0
    assert buf.stats()["counters"]["evicted"] == 2


@pytest.mark.parametrize("order", ["newest", "oldest"])
def test_draw_order(senders, order):
    buf = ReplayBuffer(capacity=10, max_staleness=10, draw_order=order, version=5)
    arrivals = [make_group(senders[0], v) for v in (3, 5, 1, 4)]
    for g in arrivals:
        buf.add(g)
    got = [g.policy_version for g in buf.draw(2)] + [g.policy_version for g in buf.draw(5)]
    assert got == ([5, 4, 3, 1] if order == "newest" else [3, 5, 1, 4])


def test_lineage_filter(senders):
    buf = ReplayBuffer(capacity=4, max_staleness=4, lineage="main")
    assert buf.add(make_group(senders[0], 0, lineage="fork")) == "lineage"
    assert buf.add(make_group(senders[0], 0, lineage="main")) == "ok"


def test_state_roundtrip_keeps_dedup(senders):
    buf = ReplayBuffer(capacity=4, max_staleness=4, version=2)
    g = make_group(senders[0], 2)
    buf.add(g)
    buf.draw(1)
    fresh = ReplayBuffer(capacity=4, max_staleness=4)
    fresh.load_state_dict(buf.state_dict())
    assert fresh.version == 2 and fresh.add(g) == "duplicate" and fresh.drawn == 1


def test_dedup_memory_is_bounded(senders):
    buf = ReplayBuffer(capacity=2, max_staleness=4, seen_ids=5)
    for _ in range(20):
        buf.add(make_group(senders[0], 0))
        buf.draw(1)
    assert len(buf.state_dict()["seen"]) == 5


def test_from_config_and_bad_arguments():
    cfg = load_config(None, ["learner.buffer_size=32", "sync.max_staleness=3", "learner.per_sampler_quota=0.25"])
    buf = ReplayBuffer.from_config(cfg)
    assert buf.capacity == 32 and buf.max_staleness == 3 and buf.quota == 8
    with pytest.raises(ValueError):
        ReplayBuffer(capacity=0, max_staleness=1)
    with pytest.raises(ValueError, match="draw_order"):
        ReplayBuffer(capacity=1, max_staleness=1, draw_order="random")
