"""What `status` reads of a run, and the status document's counts from it: the learners exactly (their index and
the designated learners' own keys: a few small records), the other peers from a census of shards
(`swarmnode.observe.census`): every shard while the run holds fewer than `CENSUS_RECORDS` records, else a random
sample of them, with each count then an estimate and its 95 % interval (`census` in the document)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from swarmnode.observe.census import CENSUS_RECORDS, Census, estimates_doc, values_of
from swarmnode.observe.health import generates
from swarmnode.protocol.peer import PeerRecord
from swarmnode.protocol.reachability import reachability_of
from swarmnode.swarm.dht import SwarmDHT

SHARDS_PER_READ = 16  # shards in one batched DHT read


async def read_census(
    dht: SwarmDHT, records: int = CENSUS_RECORDS, *, exact: bool = False, rng: random.Random | None = None
) -> Census:
    """Live records of shards of the run read in random order until `records` records or every shard (`exact`:
    every shard); a `Census` of PeerRecords."""
    return Census(await dht.sample_shards(1 << 62 if exact else records, SHARDS_PER_READ, rng), dht.shards)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def census_fields(census: Census, learners: list[PeerRecord]) -> dict[str, Any]:
    """The status document's run-wide counts from `census` (of PeerRecords), with the learners (`learners`: the
    index's, the designated ones and those in the shards read) counted exactly: `count`, `roles`, `reachability`, `versions` (samplers by version held),
    `tokens_per_s`, `rollouts_per_s` and the `census` block (exact or not, what was read, each estimate's
    interval)."""
    mine = {r.peer_id for r in learners}

    def other(r: PeerRecord) -> bool:
        return r.role != "learner" and r.peer_id not in mine

    def sampler(r: PeerRecord) -> bool:
        return r.role == "sampler"

    def health(name: str) -> Callable[[PeerRecord], float]:
        def amount(r: PeerRecord) -> float:
            return _number(r.health.get(name) if sampler(r) else None)

        return amount

    count = census.count(other)
    roles = census.by(lambda r: r.role, other)
    reach = census.by(reachability_of, other)
    versions = census.by(lambda r: r.version, lambda r: sampler(r) and r.version >= 0)
    learner_reach: dict[str, int] = {}
    for r in learners:
        learner_reach[reachability_of(r)] = learner_reach.get(reachability_of(r), 0) + 1
    reachability = values_of(reach)
    for value, n in learner_reach.items():
        reachability[value] = reachability.get(value, 0) + n
    role_counts = values_of(roles)
    if learners:
        role_counts["learner"] = len(learners)
    return {
        "count": count.value + len(learners),
        "roles": role_counts,
        "reachability": reachability,
        "versions": dict(sorted(values_of(versions).items(), key=lambda kv: -int(kv[0]))),
        "tokens_per_s": round(
            census.total(health("tokens_per_s"))
            + sum(  # SAPO nodes generate too
                _number(r.health.get("tokens_per_s")) for r in learners if generates(r.role, r.health)
            ),
            2,
        ),
        "rollouts_per_s": round(census.total(health("rollouts_per_s")), 3),
        "census": {
            "exact": census.exact,
            "shards": census.shards,
            "shards_read": len(census.read),
            "records_read": len(census.records),
            "count": {
                "estimate": count.value + len(learners),
                "low": count.low + len(learners),
                "high": count.high + len(learners),
            },
            "roles": estimates_doc(roles),
            "reachability": estimates_doc(reach),
            "versions": estimates_doc(versions),
        },
    }


def run_learners(records: list[PeerRecord], index: list[PeerRecord], designated: list[PeerRecord]) -> list[PeerRecord]:
    """Every learner record known: the designated learners' own (first), the index's, then those in `records`."""
    out: dict[str, PeerRecord] = {}
    for r in [*designated, *index, *(r for r in records if r.role == "learner")]:
        out.setdefault(r.peer_id, r)
    return list(out.values())
