"""A census of a run from some of its peer-record shards: exact when every shard was read, an estimate with its
uncertainty when only a sample was.

The run's records are spread over `network.peer_shards` keys by a hash of the peer id (`swarmnode.swarm.peer_keys`),
so a shard is a random sample of the run. `status` reads shards in random order until it holds `CENSUS_RECORDS`
records or every shard (`SwarmDHT.sample_shards`): a run of up to about that many nodes is counted exactly, a
larger one is estimated from the shards read. A count over the whole run is then the shards' mean count times the
number of shards, with a 95 % interval from the spread of the per-shard counts (Student's t for the shards read,
with the finite-population correction for m of n shards read; never below what was seen). `worst_first` and `page_of` order and page the
peers read for a person.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Set
from dataclasses import dataclass
from typing import Any

CENSUS_RECORDS = 2000  # records `status` reads before it estimates instead of counting everyone
Z95 = 1.96
# Student's t, two-sided 95 %, by degrees of freedom 1..30 (beyond 30: Z95 is within 4 %)
T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t95(df: int) -> float:
    """The two-sided 95 % quantile of Student's t with `df` degrees of freedom."""
    return T95[df - 1] if 1 <= df <= len(T95) else Z95


@dataclass(frozen=True)
class Estimate:
    """A count over the whole run: `value` within [`low`, `high`] (95 %); all three equal when exact."""

    value: int
    low: int
    high: int

    def as_dict(self) -> dict[str, int]:
        return {"estimate": self.value, "low": self.low, "high": self.high}

    def text(self) -> str:
        """`1,234` when exact, else `~1,234 (1,100-1,350)`."""
        if self.low == self.high:
            return f"{self.value:,}"
        return f"~{self.value:,} ({self.low:,}-{self.high:,})"


def estimate_total(counts: list[int], shards: int) -> Estimate:
    """The run-wide total of something counted in each of `counts` (one number per shard read) when the run has
    `shards` shards (see the module docstring)."""
    read = len(counts)
    if not 0 < read <= shards:
        raise ValueError(f"{read} shards read of {shards}")
    seen = sum(counts)
    if read == shards:
        return Estimate(seen, seen, seen)
    mean = seen / read
    var = sum((c - mean) ** 2 for c in counts) / (read - 1) if read > 1 else mean  # one shard: Poisson's guess
    half = t95(max(1, read - 1)) * shards * math.sqrt(var / read * (1 - read / shards))
    value = shards * mean
    return Estimate(round(value), max(seen, math.floor(value - half)), max(seen, math.ceil(value + half)))


class Census:
    """What a read of some shards says about the whole run. `read` maps each shard read to its live records (peer
    summaries or PeerRecords); `shards` is how many the run has."""

    def __init__(self, read: dict[int, list[Any]], shards: int) -> None:
        if not read or len(read) > shards:
            raise ValueError(f"{len(read)} shards read of {shards}")
        self.read, self.shards = read, shards

    @property
    def exact(self) -> bool:
        """Every shard was read: the counts are exact."""
        return len(self.read) == self.shards

    @property
    def records(self) -> list[Any]:
        """Every record read, shard by shard."""
        return [r for records in self.read.values() for r in records]

    def count(self, where: Callable[[Any], bool] = lambda _r: True) -> Estimate:
        """How many records of the whole run satisfy `where`."""
        return estimate_total([sum(1 for r in records if where(r)) for records in self.read.values()], self.shards)

    def by(self, key: Callable[[Any], Any], where: Callable[[Any], bool] = lambda _r: True) -> dict[str, Estimate]:
        """The run's records satisfying `where`, counted by `key` (each value seen in the records read)."""
        values = Counter(str(key(r)) for r in self.records if where(r))
        return {value: self.count(_matching(key, where, value)) for value in values}

    def total(self, amount: Callable[[Any], float]) -> float:
        """The run-wide sum of `amount` over its records, scaled from the shards read (exact when all were)."""
        return sum(amount(r) for r in self.records) * self.shards / len(self.read)


def _matching(key: Callable[[Any], Any], where: Callable[[Any], bool], value: str) -> Callable[[Any], bool]:
    """The predicate: a record satisfying `where` whose `key` is `value`."""
    return lambda r: where(r) and str(key(r)) == value


def estimates_doc(estimates: dict[str, Estimate]) -> dict[str, dict[str, int]]:
    """`{value: {"estimate", "low", "high"}}` for the status document."""
    return {value: e.as_dict() for value, e in estimates.items()}


def values_of(estimates: dict[str, Estimate]) -> dict[str, int]:
    """`{value: estimate}`: the best figure of each."""
    return {value: e.value for value, e in estimates.items()}


def worst_first(peers: Iterable[dict[str, Any]], flagged: Set[str] = frozenset()) -> list[dict[str, Any]]:
    """Peer summaries, the worst first: those an alert names, then the most versions behind, then the longest
    unheard, then the unreachable (client-only, relayed); the peer id breaks ties."""
    rank = {"client-only": 2, "relayed": 1}
    return sorted(
        peers,
        key=lambda p: (
            p["peer_id"] not in flagged,
            -(p.get("lag") or 0),
            -p.get("age_s", 0.0),
            -rank.get(p.get("reachability", ""), 0),
            p["peer_id"],
        ),
    )


def page_of(rows: list[Any], page: int, size: int) -> tuple[list[Any], int, int]:
    """Rows of page `page` (0-based, clamped into range) of `size` rows each; (rows, page shown, pages)."""
    if size < 1:
        raise ValueError("a page holds at least one row")
    pages = max(1, -(-len(rows) // size))
    page = min(max(0, page), pages - 1)
    return rows[page * size : (page + 1) * size], page, pages
