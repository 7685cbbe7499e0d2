"""Sharded peer records, the census `status` makes from some shards, its paging and summary (no network)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from swarmnode.config import load_config
from swarmnode.observe.census import Census, estimate_total, page_of, worst_first
from swarmnode.observe.status import format_status, status_document
from swarmnode.observe.status_census import census_fields, run_learners
from swarmnode.observe.status_schema import validate
from swarmnode.protocol.peer import PeerRecord
from swarmnode.swarm.peer_keys import DEFAULT_PEER_SHARDS, learners_key, peer_shard, peer_shard_keys

RUN = "census-run"


def fake(i: int, role: str = "sampler", version: int = 5, reach: str = "public", age: float = 1.0) -> PeerRecord:
    """An unsigned record (the census only counts; signatures are the DHT validator's business)."""
    return PeerRecord(
        peer_id=f"12D3KooWfake{i:06d}",
        role=role,
        version=version,
        timestamp=1000.0 - age,
        health={"reachability": reach, "tokens_per_s": 10.0} if role == "sampler" else {},
    )


def sharded(records: list[PeerRecord], shards: int) -> dict[int, list[PeerRecord]]:
    out: dict[int, list[PeerRecord]] = {s: [] for s in range(shards)}
    for r in records:
        out[peer_shard(r.peer_id, shards)].append(r)
    return out


def test_shards_are_stable_in_range_and_spread_evenly():
    ids = [f"12D3KooW{i:08d}" for i in range(6400)]
    counts = Counter(peer_shard(p, 64) for p in ids)
    assert set(counts) == set(range(64))  # every shard used
    assert max(counts.values()) < 2 * 6400 / 64  # none holds a crowd (binomial: ~100 +- 10 each)
    assert all(peer_shard(p, 64) == peer_shard(p, 64) for p in ids[:10])
    assert peer_shard(ids[0], 1) == 0
    keys = peer_shard_keys(RUN, 64)
    assert len(set(keys)) == 64 and learners_key(RUN) not in keys
    with pytest.raises(ValueError):
        peer_shard(ids[0], 0)


def test_the_config_default_shard_count_is_the_validators():
    assert load_config(None, []).network.peer_shards == DEFAULT_PEER_SHARDS


def test_an_estimate_is_exact_when_every_shard_is_read():
    assert estimate_total([3, 0, 5], 3).as_dict() == {"estimate": 8, "low": 8, "high": 8}
    with pytest.raises(ValueError):
        estimate_total([1, 2], 1)


def test_a_census_from_a_quarter_of_the_shards_covers_the_true_count():
    """10,000 records over 64 shards, 16 shards read at random: the 95 % interval holds the true count nearly
    always, and is far narrower than the count."""
    records = [fake(i, role="sampler" if i % 10 else "bootstrap") for i in range(10_000)]
    by_shard = sharded(records, 64)
    rng = random.Random(7)
    covered = widths = 0
    for _ in range(200):
        census = Census({s: by_shard[s] for s in rng.sample(range(64), 16)}, 64)
        est = census.count()
        covered += est.low <= 10_000 <= est.high
        widths += est.high - est.low
        assert not census.exact and est.low >= len(census.records)
    assert covered >= 180, covered  # ~95 % expected
    assert widths / 200 < 0.1 * 10_000
    whole = Census(by_shard, 64)
    assert whole.exact and whole.count().text() == "10,000"
    assert {k: e.value for k, e in whole.by(lambda r: r.role).items()} == {"sampler": 9000, "bootstrap": 1000}


def test_status_counts_learners_exactly_and_estimates_the_rest_with_its_interval():
    learner = fake(0, role="learner", version=7)
    samplers = [fake(i, version=7 if i % 2 else 6, reach="relayed" if i % 4 == 0 else "public") for i in range(1, 4001)]
    by_shard = sharded([learner, *samplers], 64)
    census = Census({s: by_shard[s] for s in range(0, 64, 4)}, 64)  # 16 of 64 shards
    learners = run_learners(census.records, [learner], [])
    assert learners == [learner]
    fields = census_fields(census, learners)
    assert fields["roles"]["learner"] == 1  # counted exactly, wherever its shard was
    c = fields["census"]
    assert not c["exact"] and c["shards_read"] == 16 and c["records_read"] == len(census.records)
    assert c["count"]["low"] <= 4001 <= c["count"]["high"]
    for got, truth in ((c["roles"]["sampler"], 4000), (c["versions"]["7"], 2000), (c["reachability"]["relayed"], 1000)):
        assert abs(got["estimate"] - truth) < 0.15 * truth and got["low"] < got["estimate"] < got["high"], got
    assert abs(fields["tokens_per_s"] - 40_000) < 0.3 * 40_000  # 10 tokens/s a sampler, scaled
    cfg = load_config(None, [f"run_id={RUN}"])
    doc = status_document(cfg, [learner, *census.records], now=1000.0, census=fields)
    validate(doc)
    validate(doc, builtin=True)
    assert doc["count"] == c["count"]["estimate"]
    assert doc["peers"][0]["peer_id"] == learner.peer_id and len(doc["peers"]) == len(
        set(r.peer_id for r in [learner, *census.records])
    )  # the learner, then every record read


def test_a_large_status_is_a_summary_and_a_page_of_the_worst_peers():
    learner = fake(0, role="learner", version=9)
    peers = [fake(i, version=9 - (i == 17) * 5, age=float(i % 7)) for i in range(1, 3001)]
    cfg = load_config(None, [f"run_id={RUN}"])
    by_shard = sharded([learner, *peers], 64)
    census = Census(by_shard, 64)
    doc = status_document(cfg, [learner, *census.records], now=1000.0, census=census_fields(census, [learner]))
    text = format_status(doc).splitlines()
    assert len(text) < 70  # a screenful, not 3,001 rows
    assert text[0].startswith(f"run {RUN}: 3001 live peers")
    assert any(line.startswith("roles: sampler 3,000, learner 1") for line in text)
    assert any("page 1 of 75" in line for line in text)
    worst = next(i for i, line in enumerate(text) if "the worst first" in line)
    assert text[worst + 2].startswith(peers[16].peer_id)  # 5 versions behind: the worst, first on page 1
    last = format_status(doc, page=999).splitlines()
    assert any("page 75 of 75" in line for line in last)
    small = status_document(cfg, [learner, *peers[:3]], now=1000.0)
    assert len(format_status(small).splitlines()) == 2 + 4  # a table of every peer, as before


def test_pages_clamp_and_the_worst_come_first():
    assert page_of(list(range(10)), 0, 4) == ([0, 1, 2, 3], 0, 3)
    assert page_of(list(range(10)), 7, 4) == ([8, 9], 2, 3)
    assert page_of([], 3, 4) == ([], 0, 1)
    with pytest.raises(ValueError):
        page_of([1], 0, 0)
    peers = [
        {"peer_id": "a", "lag": 0, "age_s": 1.0},
        {"peer_id": "b", "lag": 3, "age_s": 1.0},
        {"peer_id": "c", "lag": 0, "age_s": 9.0},
        {"peer_id": "d", "lag": 0, "age_s": 1.0, "reachability": "client-only"},
        {"peer_id": "e", "lag": None, "age_s": 0.0},
    ]
    assert [p["peer_id"] for p in worst_first(peers, {"e"})] == ["e", "b", "c", "d", "a"]


def test_the_dashboard_pages_a_large_run_the_worst_first_and_says_the_count_is_estimated():
    import io

    from rich.console import Console

    from swarmnode.observe.dashboard_view import History, build_view

    learner = fake(0, role="learner", version=9)
    peers = [fake(i, version=9 - (i == 17) * 5) for i in range(1, 3001)]
    by_shard = sharded([learner, *peers], 64)
    census = Census({s: by_shard[s] for s in range(16)}, 64)
    cfg = load_config(None, [f"run_id={RUN}"])
    doc = status_document(cfg, [learner, *census.records], now=1000.0, census=census_fields(census, [learner]))
    history = History()

    def render() -> str:
        console = Console(width=200, height=60, file=io.StringIO(), force_terminal=False)
        console.print(build_view(doc, history, max_rows=20))
        return console.file.getvalue()

    first = render()
    pages = -(-len(doc["peers"]) // 20)
    assert f"page 1 of {pages}" in first and "shards read" in first and f"~{doc['count']:,}" in first
    history.page = 1
    second = render()
    assert f"page 2 of {pages}" in second and learner.peer_id[-8:] not in second.split("peers, the worst")[1][:3000]


def test_few_shards_read_widen_the_interval_by_students_t():
    from swarmnode.observe.census import Z95, t95

    assert t95(1) == 12.706 and t95(12) == 2.179 and t95(30) == 2.042 and t95(31) == Z95
    narrow, wide = estimate_total([9, 10, 8, 11] * 8, 64), estimate_total([9, 10, 8, 11], 64)
    assert wide.high - wide.low > 4 * (narrow.high - narrow.low) / 2.9  # 4 shards: t(3) = 3.18, not 1.96


def test_sapo_nodes_generation_counts_in_the_runs_tokens_per_second():
    """A SAPO node advertises as a learner and generates: its record's tokens/s counts in the run's (both the
    exact read and the census), and its health record declares the field."""
    from swarmnode.observe.health import record_health
    from swarmnode.observe.health_record import SapoHealth

    sapo = [
        PeerRecord(
            peer_id=f"12D3KooWsapo{i:06d}",
            role="learner",
            version=3,
            timestamp=999.0,
            health=record_health(SapoHealth(mode="sapo", tokens_per_s=25.0, uptime=1.0)),
        )
        for i in range(2)
    ]
    sampler = fake(9)
    census = Census(sharded([*sapo, sampler], 4), 4)
    fields = census_fields(census, run_learners(census.records, sapo, []))
    assert fields["tokens_per_s"] == 60.0  # 2 x 25 + 10
    doc = status_document(load_config(None, [f"run_id={RUN}"]), [*sapo, sampler], now=1000.0)
    validate(doc)
    assert doc["tokens_per_s"] == 60.0
    assert (
        status_document(load_config(None, [f"run_id={RUN}"]), [fake(1, role="learner")], now=1000.0)["tokens_per_s"]
        == 0.0
    )  # a GEPO learner generates nothing (unless it samples its own: not counted)
