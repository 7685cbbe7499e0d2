"""Held-out evaluation during a run (`learner.eval_every`), without a network: the alert when the held-out
reward falls well below its best, and the figures in the health record's outputs (the DHT record, the status
schema, the dashboard's learner panel, /metrics). The evaluation itself runs in tests/test_trackers_node.py."""

from __future__ import annotations

import io
import random

import pytest
from health_fixtures import learner_health
from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from swarmnode.identity import Identity
from swarmnode.observe.dashboard_view import _learner_panel
from swarmnode.observe.health import find_alerts, record_health
from swarmnode.observe.metrics import HealthCollector
from swarmnode.observe.status_schema import validate

LEARNER = Identity.generate().peer_id


def held_out(history: list[float]) -> dict:
    """A learner's health with these held-out rewards (oldest first)."""
    health = learner_health(20, random.Random(0))
    health.update(
        eval_reward=history[-1], eval_pass_at_k=0.5, eval_best=max(history), eval_version=20, eval_history=history
    )
    return health


def alerts(history: list[float]) -> list[dict]:
    peers = [{"peer_id": LEARNER, "role": "learner", "version": 20, "health": record_health(held_out(history))}]
    return [a for a in find_alerts(peers, 16) if a["kind"] == "heldout_drop"]


@pytest.mark.parametrize(
    "history, fires",
    [
        ([0.2, 0.3, 0.4, 0.5, 0.55, 0.6], False),  # rising
        ([0.5, 0.48, 0.52, 0.47, 0.5, 0.49], False),  # noise around its best
        ([0.2, 0.4, 0.6, 0.6, 0.5, 0.3, 0.2], True),  # fell from 0.6 to 0.25 (means of two)
        ([0.6, 0.6, 0.2, 0.2], True),
        ([0.6, 0.1], False),  # too few evaluations to tell
        ([0.05, 0.05, 0.0, 0.0], False),  # never learned: nothing to fall from
    ],
)
def test_the_held_out_alert_fires_on_a_falling_series(history, fires):
    found = alerts(history)
    assert bool(found) == fires, found
    if fires:
        assert found[0]["severity"] == "error" and found[0]["peer_id"] == LEARNER
        assert "held-out reward fell from 0.600" in found[0]["message"]


def test_held_out_figures_reach_the_record_the_schema_the_panel_and_metrics():
    health = held_out([0.2, 0.4, 0.45])
    wire = record_health(health)
    assert wire["eval_reward"] == 0.45 and wire["eval_history"] == [0.2, 0.4, 0.45] and wire["eval_version"] == 20
    peer = {"peer_id": LEARNER, "role": "learner", "version": 20, "health": wire}
    console = Console(width=160, file=io.StringIO(), color_system=None)
    console.print(_learner_panel(peer))
    text = console.file.getvalue()
    assert "held-out" in text and "0.450 at v20" in text and "best 0.450" in text
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthCollector(lambda: health, "learner"))
    metrics = generate_latest(registry).decode()
    assert 'swarmnode_heldout_reward{role="learner"} 0.45' in metrics
    assert 'swarmnode_heldout_pass_at_k{role="learner"} 0.5' in metrics
    validate_health(wire)


def validate_health(wire: dict) -> None:
    """The status document's schema takes a learner carrying the held-out fields."""
    from health_fixtures import simulated_status

    doc = simulated_status(3)
    learner = next(p for p in doc["peers"] if p["role"] == "learner")
    learner["health"].update(wire)
    validate(doc)


def test_the_plain_status_shows_each_learners_held_out_figures():
    """`swarmnode status` (not --json) says what --json has: reward, version, pass@k and best, per learner."""
    from swarmnode.config import load_config
    from swarmnode.observe.status import format_status, status_document
    from swarmnode.protocol.peer import PeerRecord

    learner = PeerRecord(peer_id=LEARNER, role="learner", version=21, timestamp=999.0, health=held_out([0.2, 0.45]))
    sampler = PeerRecord(peer_id=Identity.generate().peer_id, role="sampler", version=21, timestamp=999.0, health={})
    cfg = load_config(None, ["run_id=heldout-run"])
    doc = status_document(cfg, [learner, sampler], now=1000.0)
    assert doc["peers"][0]["health"]["eval_reward"] == 0.45  # what --json has
    line = f"held-out, learner {LEARNER[-8:]}: reward 0.450 at v20 (pass@k 0.500, best 0.450)"
    assert line in format_status(doc).splitlines()
    untrusted = load_config(None, ["run_id=heldout-run", f"trust.learner_keys=[{sampler.peer_id}]"])
    assert "held-out" not in format_status(status_document(untrusted, [learner, sampler], now=1000.0))
    before = PeerRecord(peer_id=LEARNER, role="learner", version=0, timestamp=999.0, health={})
    assert "held-out" not in format_status(status_document(cfg, [before], now=1000.0))  # none evaluated yet
