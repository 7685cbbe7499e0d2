"""The scale lab's arithmetic (bench/scale): a version's spread from the hosts' lines, per-node rates over a
window, the model's fits, its held-out check and the limits it names."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale import model  # noqa: E402
from scale.curves import publisher_chunks, sampler_states, spread, summarise, version_lag  # noqa: E402


def _have(name: str, role: str, v: int, t: float) -> dict:
    return {"ev": "have", "name": name, "role": role, "v": v, "t": t}


def test_spread_counts_a_newer_version_as_holding_the_older_and_a_missing_sampler_as_never() -> None:
    haves = [_have("learner", "learner", 1, 100.0), _have("a", "sampler", 1, 101.0), _have("b", "sampler", 2, 104.0)]
    got = spread(haves, ["a", "b"], since=90.0, end=200.0)
    assert got["versions"] == 1 and got["p50_s"] == 1.0 and got["p100_s"] == 4.0
    missing = spread(haves, ["a", "b", "c"], since=90.0, end=200.0)
    assert missing["p100_s"] == float("inf")
    assert spread(haves, ["a"], since=90.0, end=120.0) == {"versions": 0}  # too close to the end to count


def test_summarise_rates_are_per_minute_over_the_window() -> None:
    rows = []
    for name, role, per_s in (("s1", "sampler", 10), ("s2", "sampler", 30), ("bootstrap", "bootstrap", 50)):
        for t in (0.0, 60.0, 120.0):
            rows.append(
                {"ev": "node", "t": t, "name": name, "role": role, "ctl_in": per_s * t, "ctl_out": per_s * t, "sent": 0}
            )
    doc = summarise(rows, since=60.0)
    ctl = doc["control_bytes_per_min"]
    assert ctl["median_sampler"] == pytest.approx(2 * 20 * 60)
    assert ctl["busiest_node"] == pytest.approx(2 * 30 * 60) and ctl["bootstrap"] == pytest.approx(2 * 50 * 60)


def _results(median, busiest) -> list[dict]:
    return [
        {"samplers": n - 2, "control_bytes_per_min": {"median_sampler": median(n), "busiest_node": busiest(n)}}
        for n in (10, 18, 34, 66)
    ]


def test_the_model_fits_its_forms_and_predicts_the_held_out_largest_point() -> None:
    doc = model.build(_results(lambda n: 1000 + 50 * n, lambda n: 2000 + 3 * n * n))
    assert doc["check"]["median"]["error"] == pytest.approx(0.0, abs=1e-9)
    assert doc["check"]["busiest"]["error"] == pytest.approx(0.0, abs=1e-6)
    row = next(r for r in doc["table"] if r["n"] == 10_000)
    assert row["median"] == pytest.approx(1000 + 50 * 10_000) and row["busiest"] == pytest.approx(2000 + 3e8)


def test_a_quadratic_that_would_bend_down_is_fitted_as_a_line() -> None:
    coef = model.fit([10, 20, 40, 80], [100, 190, 350, 600], "quadratic")  # bends down
    assert coef[2] == 0.0 and coef[1] > 0


def test_limits_name_the_full_peers_key_first_past_its_cap() -> None:
    assert model.limits({"n": 100}, record_bytes=700) == ["none of the modelled limits"]
    first = model.limits({"n": 1000, "connections": 999}, record_bytes=700)[0]
    assert first.startswith("the peers key") and "shard" in first
    assert any("bootstraps" in line for line in model.limits({"n": 10_000, "connections": 9999}, 700))


RESULTS = Path(__file__).resolve().parents[2] / "bench" / "scale" / "results"


def _recorded(*names: str) -> list[dict]:
    return [doc for name in names for doc in json.loads((RESULTS / f"{name}.json").read_text())]


def test_the_sharded_model_predicts_the_recorded_largest_run_within_25_percent() -> None:
    # the lab's recorded sharded runs (6-26 nodes): bytes a call fitted without the largest, which it predicts
    doc = model.build(_recorded("after", "gate", "gate2"), model.SHARDED)
    for key in ("median", "busiest", "bootstrap"):
        check = doc["check"][key]
        assert check["n"] == 26 and abs(check["error"]) <= 0.25, (key, check)


def test_the_bytes_a_call_grow_by_the_peers_a_reply_lists() -> None:
    # the fitted slope is a listed peer (62 B of node id and peer id) times the keys a call asks (1 to 4:
    # hivemind asks sqrt(keys) a call of a batched read), not a constant that absorbs whatever the points do
    listed = model.listed_peer_bytes()
    assert listed == 62
    doc = model.build(_recorded("after", "gate", "gate2"), model.SHARDED)
    for key in ("median", "busiest", "bootstrap"):
        _, per_peer = doc["coefficients"][key][1]
        assert listed <= per_peer <= 4 * listed, (key, per_peer)
    row = {r["n"]: r for r in doc["table"]}
    # past one bucket a reply is full: the bytes a node pays grow with the lookup's hops (log N) alone
    assert row[10_000]["median"] / row[128]["median"] == pytest.approx(math.log2(10_000) / math.log2(128))


def test_the_model_predicts_a_later_run_it_was_not_fitted_to() -> None:
    # fitted to 6-26 nodes, then a later lab run of 34 nodes (results/start32.json): its bytes from its calls
    doc = model.build(_recorded("after", "gate", "gate2"), model.SHARDED)
    later = model.per_call_points(_recorded("start32"))
    for key in ("median", "busiest", "bootstrap"):
        ((n, calls, real),) = later[key]
        guess = calls * model.predict(doc["coefficients"][key][1], "bucket", n)
        assert n == 34 and abs(guess - real) <= 0.25 * real, (key, guess, real)


def test_bytes_a_call_stop_growing_at_the_results_bucket_size() -> None:
    def results(k: int) -> list[dict]:
        return [
            {
                "samplers": n - 2,
                "dht_bucket_size": k,
                "control_calls_per_min": {"median_sampler": 1000.0},
                "control_bytes_per_min": {"median_sampler": 1000.0 * (500 + 60 * min(n - 1, k))},
            }
            for n in (6, 10, 18, 34)
        ]

    for k in (8, 20):
        doc = model.build(results(k), model.SHARDED)
        assert doc["bucket"] == k and doc["check"]["median"]["error"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(SystemExit, match="bucket sizes"):
        model.build(results(8) + results(20), model.SHARDED)


def test_calls_grow_past_the_measured_sizes_as_the_lookup_bench_counts_them() -> None:
    rows = [
        {
            "nodes": n,
            "bucket": 8,
            "store": {"calls": 10.0},
            "read_key": {"calls": 8.0},
            "read_8_shards": {"calls": 20.0 + 10 * math.log2(n)},
        }
        for n in (10, 20, 40, 80)
    ]
    growth = model.lookup_growth(rows, 8)
    assert growth(80) / growth(20) == pytest.approx((38 + 10 * math.log2(80)) / (38 + 10 * math.log2(20)))
    calls = [(18, 1000.0), (34, 1000.0)]
    assert model.calls_at(20, calls, 8, growth) == 1000.0  # within the sizes measured: the measurement
    assert model.calls_at(10_000, calls, 8, growth) == pytest.approx(1000.0 * growth(10_000) / growth(26))
    assert model.lookup_growth(rows, 20) is None  # no rows of that k


def test_version_lag_compares_the_samplers_that_sent_nothing_with_those_that_sent() -> None:
    haves = [{"role": "learner", "name": "learner", "t": t, "v": int(t)} for t in range(0, 101, 10)]
    haves += [{"role": "sampler", "name": "near", "t": t, "v": int(t) - 2} for t in range(0, 101, 10)]
    haves += [{"role": "sampler", "name": "far", "t": 0.0, "v": 0}]
    nodes = {
        "near": [{"t": 0.0, "sent": 0}, {"t": 100.0, "sent": 40}],
        "far": [{"t": 0.0, "sent": 5}, {"t": 100.0, "sent": 5}],
    }
    got = version_lag(haves, nodes, ["near", "far"], since=0.0, until=100.0, behind=8, step=10.0)
    assert got["sending"]["samplers"] == 1 and got["sending"]["lag_mean"] == pytest.approx(2.0)
    assert got["sending"]["share_far_behind"] == 0.0
    assert got["silent"]["samplers"] == 1 and got["silent"]["lag_mean"] == pytest.approx(50.0)
    assert got["silent"]["share_far_behind"] == pytest.approx(10 / 11)  # behind more than 8 from t = 10 on


def test_sampler_states_are_shares_of_the_window_per_kind_of_sampler() -> None:
    nodes = {
        "a": [{"t": t, "sent": t, "state": "generating" if t < 30 else "credit"} for t in (0, 10, 20, 30)],
        "b": [{"t": t, "sent": 0, "state": "too stale"} for t in (0, 10, 20, 30)],
    }
    got = sampler_states(nodes, ["a", "b"], since=0.0, until=30.0)
    assert got["sending"] == {"samplers": 1, "credit": 0.25, "generating": 0.75}
    assert got["silent"] == {"samplers": 1, "too stale": 1.0}
    assert sampler_states({"a": [{"t": 0, "sent": 0}, {"t": 9, "sent": 1}]}, ["a"], 0.0, 10.0) == {}  # older rows


def test_publisher_chunks_counts_the_learners_chunks_asked_while_a_holder_was_unheard() -> None:
    nodes = {
        "a": [
            {"t": 0, "seed_chunks": {"asked": 5, "unheard": 1}},
            {"t": 9, "seed_chunks": {"asked": 15, "unheard": 5}},
        ],
        "b": [{"t": 0}, {"t": 9, "seed_chunks": {"asked": 10}}],
    }
    assert publisher_chunks(nodes, ["a", "b"], since=0.0) == {"asked": 20, "unheard": 4, "unheard_share": 0.2}
    assert publisher_chunks({"a": [{"t": 0}, {"t": 9}]}, ["a"], since=0.0) == {}  # older rows
