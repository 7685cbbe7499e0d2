"""Swarm health without a network: the health record's size, alerts, the status schema, the dashboard view and
the Prometheus rendering, on simulated swarms of real signed PeerRecords (tests/health_fixtures.py)."""

from __future__ import annotations

import copy
import io
import json
import random
import re
import sys

import pytest
from health_fixtures import HARDWARE, learner_health, simulated_records, simulated_status
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.observe.dashboard_view import History, build_view, sparkline
from swarmnode.observe.health import (
    HISTORY_LEN,
    MAX_BUCKETS,
    bucket_label,
    bucket_of,
    record_health,
    reward_collapse,
    swarm_summary,
)
from swarmnode.observe.health_record import UnknownHealthKey
from swarmnode.observe.metrics import HEALTH_METRICS, HealthCollector
from swarmnode.observe.status import format_status, status_document
from swarmnode.observe.status_schema import SchemaError, validate
from swarmnode.protocol.peer import MAX_PEER_RECORD_BYTES, PeerRecord


def as_json(doc: dict) -> dict:
    return json.loads(json.dumps(doc))


def render(doc: dict, width: int = 160, history: History | None = None) -> str:
    console = Console(width=width, height=50, file=io.StringIO(), color_system=None)
    console.print(build_view(doc, history))
    return console.file.getvalue()


def kinds(doc: dict) -> list[str]:
    return [a["kind"] for a in doc["alerts"]]


# ------------------------------------------------------------------------------------------ the health record


def test_full_learner_health_record_stays_well_under_the_size_limit():
    health = learner_health(500, random.Random(0), invalid_peers=[Identity.generate().peer_id for _ in range(9)])
    health["staleness_hist"] = [10**9] * 40  # longer than any real histogram: must be cut, not rejected
    health["rejected"] = {f"reason_{i:02d}_{'x' * 20}": 10**9 for i in range(30)}
    small = record_health(health)
    assert len(small) <= 32
    assert len(small["reward_history"]) == HISTORY_LEN and len(small["staleness_hist"]) <= HISTORY_LEN
    assert "time" not in small and "loss" not in small and "rejected" not in small
    record = PeerRecord.create(
        Identity.generate(),
        role="learner",
        version=500,
        versions=list(range(460, 500)),
        hardware={"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "gpu_mem_gb": 79.2, "cpus": 64, "ram_gb": 1007.5},
        addrs=[f"/ip4/203.0.113.{i}/tcp/31337/p2p/{'x' * 52}" for i in range(8)],
        software="swarmnode/0.1.0",
        health=small,
    )
    size = len(record.encode())
    assert size < MAX_PEER_RECORD_BYTES // 4, f"{size} bytes: keep the record well under the 16 KiB limit"
    assert PeerRecord.decode(record.encode()).health == small


def test_staleness_buckets_are_powers_of_two():
    assert [bucket_of(t) for t in (0, 1, 2, 3, 4, 7, 8, 15, 16)] == [0, 1, 2, 2, 3, 3, 4, 4, 5]
    assert bucket_of(10**9) == MAX_BUCKETS - 1
    assert [bucket_label(i) for i in range(5)] == ["0", "1", "2-3", "4-7", "8-15"]
    assert bucket_label(MAX_BUCKETS - 1).endswith("+")


def test_record_health_turns_rejections_into_parallel_lists_and_drops_junk_values():
    small = record_health(
        {
            "version": 3,
            "kl": float("nan"),
            "paused": "",
            "grad_norm": object(),
            "reward_mean": 0.5,
            "rejected": {"invalid": 2, "stale": 7},
            "step": True,
        }
    )
    assert small == {
        "version": 3,
        "paused": "",
        "reward_mean": 0.5,
        "rejected_reasons": ["stale", "invalid"],
        "rejected_counts": [7, 2],
    }


def test_record_health_refuses_a_key_no_record_declares():
    with pytest.raises(UnknownHealthKey, match="loss"):
        record_health({"version": 3, "loss": 0.1})


# ------------------------------------------------------------------------------------------------- alerts


def test_a_healthy_swarm_has_no_alerts():
    doc = simulated_status(20)
    assert doc["alerts"] == []
    assert doc["newest_version"] == 40 and doc["roles"] == {"bootstrap": 1, "learner": 1, "sampler": 18}
    assert sum(doc["versions"].values()) == 18 and doc["tokens_per_s"] > 0
    assert doc["max_staleness"] == 16  # the learner's own bound, not the reader's config


def test_alerts_no_learner():
    doc = simulated_status(5, learners=0)
    assert kinds(doc) == ["no_learner"]


def test_alerts_sampler_beyond_max_staleness():
    doc = simulated_status(6, lags=[17, 16, 0, 3])
    stale = [a for a in doc["alerts"] if a["kind"] == "too_stale"]
    assert len(stale) == 1 and "17 versions behind" in stale[0]["message"]  # 16 == the bound: still fine
    lagging = next(p for p in doc["peers"] if p["peer_id"] == stale[0]["peer_id"])
    assert lagging["lag"] == 17 and lagging["version"] == 40 - 17


def test_alerts_invalid_data_names_the_peer():
    bad = Identity.generate().peer_id
    doc = simulated_status(4, invalid_peers=[bad])
    assert [(a["kind"], a["peer_id"]) for a in doc["alerts"]] == [("invalid_data", bad)]


def test_alerts_reward_collapse_is_an_error_and_comes_first():
    doc = simulated_status(4, rewards=[0.6] * 20 + [0.1] * 12, lags=[30])
    assert kinds(doc) == ["reward_collapse", "too_stale"]
    assert "0.600 to 0.100" in doc["alerts"][0]["message"]


@pytest.mark.parametrize(
    "rewards, collapsed",
    [
        ([0.3, 0.32, 0.35, 0.31, 0.33, 0.36, 0.34], False),  # noise
        ([0.6, 0.6, 0.6, 0.1, 0.1, 0.1], True),  # fell by 5/6
        ([0.6, 0.6, 0.6, 0.35, 0.35, 0.35], False),  # fell by less than half
        ([0.06, 0.06, 0.06, 0.0, 0.0, 0.0], False),  # never learned: not a collapse
        ([0.6, 0.6, 0.1, 0.1], False),  # too short to tell
        ([0.6, None, 0.6, 0.6, 0.1, 0.1, 0.1], True),  # gaps are skipped
    ],
)
def test_reward_collapse(rewards, collapsed):
    assert (reward_collapse(rewards) is not None) == collapsed


def test_swarm_summary_counts_version_holders():
    peers = [
        {"peer_id": "a", "role": "sampler", "version": 3, "health": {"tokens_per_s": 10.0}},
        {"peer_id": "b", "role": "sampler", "version": 3, "health": {"tokens_per_s": 5.5}},
        {"peer_id": "c", "role": "sampler", "version": -1, "health": {}},
        {"peer_id": "d", "role": "learner", "version": 4, "health": {"tokens_per_s": 99.0}},
    ]
    assert swarm_summary(peers) == {
        "newest_version": 4,
        "tokens_per_s": 15.5,
        "rollouts_per_s": 0.0,
        "versions": {"3": 2},
    }


# ------------------------------------------------------------------------------------------------- schema


def test_status_document_fits_its_schema_and_bad_ones_do_not():
    doc = as_json(simulated_status(12, lags=[20], invalid_peers=["12D3KooWdead"], rewards=[0.5] * 10 + [0.0] * 5))
    for builtin in (False, True):
        validate(doc, builtin=builtin)
        for mutate, _where in [
            (lambda d: d.pop("alerts"), "alerts"),
            (lambda d: d.update(schema_version=99), "schema_version"),
            (lambda d: d["peers"][1].update(role="wizard"), "role"),
            (lambda d: d["peers"][1]["health"].update(clip_frac=1.5), "clip_frac"),
            (lambda d: d["peers"][2].update(version="7"), "version"),
            (lambda d: d["alerts"][0].update(extra=1), "extra"),
        ]:
            bad = copy.deepcopy(doc)
            mutate(bad)
            with pytest.raises(SchemaError):
                validate(bad, builtin=builtin)


# ---------------------------------------------------------------------------------------------------- view


def test_sparkline():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([]) == "" and sparkline([None]) == ""
    assert sparkline([1.0, 1.0]) == "▅▅" and sparkline([0, None, 7]) == "▁ █"
    assert len(sparkline(range(100), width=10)) == 10


def test_view_shows_peers_roles_versions_learner_figures_and_alerts():
    doc = simulated_status(8, lags=[25, 0, 1], rewards=[0.6] * 20 + [0.1] * 12)
    learner = next(p for p in doc["peers"] if p["role"] == "learner")
    history = History()
    history.add(doc)
    text = render(doc, history=history)
    for needle in (
        "run sim-run",
        "newest version 40",
        "1 learner",
        "6 sampler",
        "1 bootstrap",
        learner["peer_id"][-8:],
        "reward mean",
        "0.100",
        "best 0.600",
        "versions held",
        "v40",
        "τ 0",
        "error: learner",
        "25 versions behind",
        "q to quit",
    ):
        assert needle in text, needle
    for p in doc["peers"]:
        assert p["peer_id"][-8:] in text


def test_view_limits_rows_and_survives_narrow_terminals_and_empty_swarms():
    doc = simulated_status(50)
    text = render(doc)
    assert "30 more" in text  # 20 rows by default
    render(doc, width=60)
    empty = simulated_status(0, learners=0)
    assert "no learner" in render(empty)
    failed = History()
    failed.error = "poll timed out"
    assert "last poll failed: poll timed out" in render(doc, history=failed)


def test_view_has_a_line_for_every_learner_beyond_the_two_panels():
    doc = simulated_status(12, learners=4)
    learners = [p for p in doc["peers"] if p["role"] == "learner"]
    text = render(doc, width=200)
    assert len(learners) == 4 and "2 more learners" in text
    section = text.split("2 more learners")[1].split("alerts")[0]
    for p in learners[2:]:  # no panel, but a line with its step and reward
        line = next(ln for ln in section.splitlines() if p["peer_id"][-8:] in ln)
        assert str(p["health"]["step"]) in line and f"{p['health']['reward_mean']:.3f}" in line
    assert not any(p["peer_id"][-8:] in section for p in learners[:2])  # those two have panels


def test_log_lines_go_into_the_view_not_onto_the_terminal(capsys):
    import logging

    from swarmnode.observe.dashboard import logs_into

    noisy = logging.getLogger("hivemind.fake")  # a library logger with its own terminal handler
    handler = logging.StreamHandler(sys.stderr)
    noisy.addHandler(handler)
    history = History()
    try:
        with logs_into(history):
            noisy.warning("daemon hiccup %d", 7)
            noisy.info("chatter")  # below warning: dropped
        noisy.warning("after the view")
    finally:
        noisy.removeHandler(handler)
    err = capsys.readouterr().err
    assert "daemon hiccup" not in err and "after the view" in err  # handler restored afterwards
    assert len(history.logs) == 1 and "hivemind.fake: daemon hiccup 7" in history.logs[0]
    assert "daemon hiccup 7" in render(simulated_status(3), history=history)


# ------------------------------------------------------------------------------------------------- metrics


def test_prometheus_rendering_of_a_learner_health_dict():
    health = learner_health(40, random.Random(1), invalid_peers=["x"])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthCollector(lambda: health, "learner"))
    text = generate_latest(registry).decode()
    for key in (
        "version",
        "step",
        "reward_mean",
        "kl",
        "is_weight_var",
        "ratio_peqq_var",
        "entropy",
        "clip_frac",
        "step_time",
        "dropped_stale",
        "groups_received",
    ):
        name, kind, _ = HEALTH_METRICS[key]
        assert f'{name}{"_total" if kind == "counter" else ""}{{role="learner"}}' in text, name
    assert 'swarmnode_groups_rejected_total{reason="stale"} 3.0' in text
    assert 'swarmnode_staleness_groups_total{bucket="0"}' in text


def test_a_50_peer_view_renders_every_peer_and_the_lagging_alert():
    """50 simulated peers fit one view (peers table, versions panel, alerts); the refresh time is measured in
    bench/dashboard-refresh/dashboard_refresh.py, not asserted here."""
    doc = simulated_status(50, learners=2, lags=[20])
    console = Console(width=200, height=200, file=io.StringIO(), color_system=None)
    console.print(build_view(doc, None, max_rows=60))
    text = console.file.getvalue()
    shown = [p for p in doc["peers"] if p["peer_id"][-8:] in text]
    assert len(doc["peers"]) == 50 and len(shown) == 50, f"{len(shown)} of 50 peers shown"
    console = Console(width=200, height=60, file=io.StringIO(), color_system=None)
    console.print(build_view(doc, None, max_rows=20))
    assert "30 more" in console.file.getvalue()  # a short terminal says how many rows it left out
    assert "samplers beyond" in text or "behind" in text, text[-2000:]


def test_dashboard_shows_a_sapo_nodes_own_policy():
    doc = simulated_status(6, learners=2)
    learner = next(p for p in doc["peers"] if p["role"] == "learner")
    learner["health"].update(
        mode="sapo",
        local_groups=40,
        external_groups=36,
        reward_lies=3,
        external_peers=["a1b2c3d4e5f6", "0f9e8d7c6b5a"],
        external_counts=[20, 16],
        implausible_groups=8,
        implausible_peers=["99aa88bb77cc"],
        implausible_counts=[8],
        distrusted_peers=["99aa88bb77cc"],
        plausibility_floor=-3.5,
    )
    validate(as_json(doc))
    text = render(doc)
    assert "sapo node" in text and "40 own + 36 external" in text
    assert "e5f6 20" in text and "6b5a 16" in text
    assert "88bb77cc 8" in text and "distrusted" in text


def test_status_reads_the_designated_learners_first_and_marks_a_self_declared_one():
    """A throwaway key's learner record (ahead in version, reporting the honest sampler as invalid) is shown,
    marked, and believed in nothing: not the newest version, not the lag, not an alert naming the sampler."""
    records = simulated_records(6, learners=1, newest=40)
    honest = records[1]
    rogue = PeerRecord.create(
        Identity.generate(),
        role="learner",
        version=10_000,
        versions=[10_000],
        hardware=HARDWARE,
        throughput=0.0,
        software="swarmnode/0.1.0",
        health=record_health(learner_health(40, random.Random(1), invalid_peers=[records[3].peer_id])),
    )
    rogue = PeerRecord.decode(rogue.encode())
    cfg = load_config("tiny-cpu", ["run_id=sim-run", f"trust.learner_keys=[{honest.peer_id}]"])
    doc = status_document(cfg, [rogue, *records])
    validate(as_json(doc), builtin=True)
    learners = [p for p in doc["peers"] if p["role"] == "learner"]
    assert [p["designated"] for p in learners] == [True, False] and learners[0]["peer_id"] == honest.peer_id
    assert doc["newest_version"] == 40
    kinds = {(a["kind"], a["peer_id"]) for a in doc["alerts"]}
    assert ("self_declared_learner", rogue.peer_id) in kinds
    assert not any(k == "invalid_data" for k, _ in kinds), doc["alerts"]
    assert "learner?" in format_status(doc)


def test_a_flood_of_self_declared_learners_makes_one_alert_that_counts_them():
    records = simulated_records(4, learners=1, newest=12)
    fakes = [PeerRecord.create(Identity.generate(), role="learner", version=10**6) for _ in range(50)]
    cfg = load_config("tiny-cpu", ["run_id=sim-run", f"trust.learner_keys=[{records[1].peer_id}]"])
    doc = status_document(cfg, [*fakes, *records])
    validate(as_json(doc), builtin=True)
    flagged = [a for a in doc["alerts"] if a["kind"] == "self_declared_learner"]
    assert len(flagged) == 1 and flagged[0]["peer_id"] is None and "50 peers" in flagged[0]["message"]
    assert doc["newest_version"] == 12 and doc["peers"][0]["peer_id"] == records[1].peer_id


def test_the_staleness_histogram_shows_a_block_for_every_bucket_that_has_groups():
    """A bucket with a few groups beside one with thousands still shows: a lone block, not an empty bar."""
    doc = simulated_status(4, learners=1)
    learner = next(p for p in doc["peers"] if p["role"] == "learner")
    learner["health"]["staleness_hist"] = [3, 5000, 0]
    text = render(doc)
    assert re.search(r"τ 0 +█ +3\b", text) and re.search(r"τ 1 +█{24} +5000", text), text
    assert re.search(r"τ 2-3 +0\b", text), text
