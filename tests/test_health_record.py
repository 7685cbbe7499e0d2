"""The typed health records are the one definition of every health field: the tables of
docs/status-and-metrics.md, the Prometheus families and the status schema all come from them, and a key no record
declares is an error."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from swarmnode.observe.health import record_health
from swarmnode.observe.health_fields import FIELDS, WIRE_FIELDS
from swarmnode.observe.health_record import BootstrapHealth, LearnerHealth, SamplerHealth, UnknownHealthKey
from swarmnode.observe.health_tables import markdown_tables
from swarmnode.observe.metrics import HealthCollector
from swarmnode.observe.status_schema import HEALTH_SCHEMA

DOC = Path(__file__).resolve().parents[1] / "docs" / "status-and-metrics.md"


@pytest.mark.parametrize("name", sorted(markdown_tables()))
def test_the_documented_tables_are_the_generated_ones(name):
    table = markdown_tables()[name]
    assert table in DOC.read_text(), (
        f"docs/status-and-metrics.md's {name} table differs from the health records; paste `python -m swarmnode.observe.health_tables`"
    )


def test_an_unknown_key_is_an_error_not_a_silent_drop():
    health = SamplerHealth()
    with pytest.raises(UnknownHealthKey, match="groups_sent_total"):
        health.update(groups_sent_total=3)  # a renamed key
    with pytest.raises(UnknownHealthKey):
        LearnerHealth().update(tokens_per_s=1.0)  # another role's key
    with pytest.raises(UnknownHealthKey):
        record_health({"uptime": 1.0, "reward": 0.5})
    assert record_health({"uptime": 1.0, "reward": 0.5}, strict=False) == {"uptime": 1.0}  # a step's figures


def test_the_status_schema_takes_exactly_the_wire_fields():
    assert set(HEALTH_SCHEMA["properties"]) == set(WIRE_FIELDS)
    assert HEALTH_SCHEMA["additionalProperties"] is False
    assert "rejected" in FIELDS and "rejected" not in WIRE_FIELDS  # a dict: on the wire as two lists


def test_a_record_renders_as_metrics_and_as_its_small_dht_form():
    health = LearnerHealth(
        uptime=3.0, version=2, step=7, reward_mean=0.25, staleness_hist=[4, 1], rejected={"stale": 3}
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthCollector(lambda: health, "learner"))
    text = generate_latest(registry).decode()
    assert 'swarmnode_learner_steps_total{role="learner"} 7.0' in text
    assert 'swarmnode_staleness_groups_total{bucket="1"} 1.0' in text
    assert 'swarmnode_groups_rejected_total{reason="stale"} 3.0' in text
    assert record_health(health) == {
        "uptime": 3.0,
        "version": 2,
        "step": 7,
        "reward_mean": 0.25,
        "staleness_hist": [4, 1],
        "rejected_reasons": ["stale"],
        "rejected_counts": [3],
    }
    assert record_health(BootstrapHealth(uptime=1.0, peers_seen=4)) == {"uptime": 1.0, "peers_seen": 4}
