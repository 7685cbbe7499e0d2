"""`swarmnode status`: the run's status document (schema in `swarmnode.observe.status_schema`) and its plain table."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from swarmnode.config import NodeConfig, known_run_ids
from swarmnode.identity import Identity
from swarmnode.observe.board_view import board_lines, mend_names, read_board
from swarmnode.observe.health import find_alerts, peer_lag, staleness_bound, swarm_summary
from swarmnode.observe.status_census import census_fields, read_census, run_learners
from swarmnode.observe.status_schema import STATUS_SCHEMA_VERSION
from swarmnode.observe.status_text import PAGE_ROWS, alert_lines, held_out_lines, summary_lines
from swarmnode.protocol.peer import PeerRecord, software_build
from swarmnode.protocol.public_name import NamePolicy
from swarmnode.protocol.reachability import reachability_of
from swarmnode.swarm.follower import with_designated
from swarmnode.swarm.membership import Membership
from swarmnode.swarm.p2p import parse_initial_peer
from swarmnode.swarm.run_name import ask_run_name


def client_member(cfg: NodeConfig) -> Membership:
    """A read-only client-mode member with a throwaway key (for `status` and the dashboard)."""
    return Membership(cfg, Identity.generate(), "client", client_mode=True)


def status_document(
    cfg: NodeConfig, live: list[PeerRecord], now: float | None = None, census: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The `status --json` document (schema in `swarmnode.observe.status_schema`) from the run's live peer records
    (those read); `census` (`status_census.census_fields`) replaces its run-wide counts by the census's."""
    now = time.time() if now is None else now
    peers = [r.summary(now) for r in live]
    keys = set(cfg.trust.learner_keys)
    if keys:  # with designated learners, any other "learner" record is self-declared: shown, marked, not believed
        for p in peers:
            if p["role"] == "learner":
                p["designated"] = p["peer_id"] in keys
        peers.sort(key=lambda p: not p.get("designated", False))  # the designated learners first
    believed = [p for p in peers if p.get("designated", True)]
    summary = swarm_summary(believed)
    for p in peers:
        p["lag"] = peer_lag(p, summary["newest_version"])
        p["reachability"] = reachability_of(p)
    doc = {
        "schema_version": STATUS_SCHEMA_VERSION,
        "run_id": cfg.run_id,
        "queried_at": now,
        "count": len(live),
        "roles": dict(Counter(r.role for r in live)),
        **summary,
        "max_staleness": staleness_bound(believed, cfg.sync.max_staleness),
        "reachability": dict(Counter(p["reachability"] for p in peers)),
        "builds": dict(Counter(software_build(p["software"]) for p in peers).most_common()),
        "peers": peers,
        "alerts": find_alerts(believed, cfg.sync.max_staleness) + self_declared_alerts(peers),
    }
    doc.update(census or {})
    return mend_names(doc, NamePolicy.of(cfg.names))  # public names: shown harmlessly, never trusted


MAX_SELF_DECLARED_ALERTS = 3  # beyond this many self-declared learners (a flood), one alert counts them


def self_declared_alerts(peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One warning per learner record that is not one of `trust.learner_keys` (`designated` false); past
    `MAX_SELF_DECLARED_ALERTS` of them, one warning that counts them all (a flood of records, not a list)."""
    rogue = [p["peer_id"] for p in peers if p.get("designated") is False]
    if len(rogue) > MAX_SELF_DECLARED_ALERTS:
        return [
            {
                "kind": "self_declared_learner",
                "severity": "warning",
                "peer_id": None,
                "message": f"{len(rogue)} peers say they are learners but are not trust.learner_keys (a flood of "
                "throwaway records?): their figures and reports are left out",
            }
        ]
    return [
        {
            "kind": "self_declared_learner",
            "severity": "warning",
            "peer_id": peer,
            "message": f"{peer} says it is a learner but is not one of trust.learner_keys: its figures "
            "and reports are left out",
        }
        for peer in rogue
    ]


NODE_ROLES = ("sampler", "learner", "auto")


async def other_runs(member: Membership) -> dict[str, int]:
    """Live peers under the keys of other known runs (`known_run_ids`), by run id, where there are any."""
    found = {}
    for run_id in dict.fromkeys([*await served_runs(member), *known_run_ids()]):
        if run_id != member.cfg.run_id:
            peers = [r for r in await member.dht.live_peers(run_id=run_id) if r.role in NODE_ROLES]
            if peers:
                found[run_id] = len(peers)
    return found


async def served_runs(member: Membership) -> list[str]:
    """The runs the initial peers (bootstraps) say they serve."""
    peers = [parse_initial_peer(text).peer_id for text in member.cfg.network.initial_peers]
    return [run for run in await asyncio.gather(*(ask_run_name(member.dht.p2p, p) for p in peers)) if run]


async def read_status(member: Membership, exact: bool = False) -> dict[str, Any]:
    """One read of the run through a started client member: the status document. The learners are read exactly,
    the other peers through a census of shards (`status_census`): all of them in a run of up to ~2,000 records,
    else a sample, and the counts are then estimates (`exact`: read every shard whatever the run's size).

    A run with no nodes is most often a run-id mismatch (`bootstrap` without `--config` is `swarmnode-demo`, the
    tiny-cpu nodes are `tiny-demo`): the document then says which other known runs have live peers here.
    """
    census = await read_census(member.dht, exact=exact)
    learners = run_learners(census.records, await member.dht.learners(), await member.designated_learners())
    doc = status_document(member.cfg, with_designated(census.records, learners), census=census_fields(census, learners))
    if not any(p["role"] in NODE_ROLES for p in doc["peers"]):
        doc["other_runs"] = await other_runs(member)
    return await read_board(member, doc)


async def query_status(cfg: NodeConfig, exact: bool = False) -> dict[str, Any]:
    """Join as a client with a throwaway key, read the run's live peer records, leave; the status document."""
    member = await client_member(cfg).start()
    try:
        return await read_status(member, exact)
    finally:
        await member.stop()


def format_status(doc: dict[str, Any], page: int = 0, page_rows: int = PAGE_ROWS) -> str:
    """A plain table of the status document, the learners' held-out figures, then its alerts; past `page_rows` peers, a summary (counts by role,
    version and reachability, the learners) and page `page` of the others, the worst first (`status_text`)."""
    lines = summary_lines(doc, page, page_rows)
    lines += held_out_lines(doc)
    lines += board_lines(doc)
    lines += alert_lines(doc["alerts"])
    if (hint := other_runs_hint(doc)) is not None:
        lines.append(hint)
    return "\n".join(lines)


def other_runs_hint(doc: dict[str, Any]) -> str | None:
    """One line when the run has no nodes: the other runs with live peers on this DHT, and what to do."""
    if "other_runs" not in doc:
        return None
    found = doc["other_runs"]
    if not found:
        return (
            f"no nodes in run {doc['run_id']}; none in the other known runs either (the nodes print their "
            "run in their `ready ... run=` line: give status the same --config or --set run_id)"
        )
    runs = ", ".join(f"{run} ({n} live)" for run, n in sorted(found.items()))
    return (
        f"no nodes in run {doc['run_id']}, but this DHT has nodes in run(s): {runs}; use the nodes' --config "
        "or --set run_id=..."
    )
