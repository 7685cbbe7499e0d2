"""Whether other peers can dial a node, as its peer record says, and what that allows.

A node decides its reachability at join (`swarmnode.swarm.reachability`) and advertises it in its record's
health under `reachability`:
- `public`: others dial it directly (it serves the DHT);
- `relayed`: it cannot be dialled, but holds a circuit-relay reservation on a bootstrap: others reach it through
  the relay (slower, and the relay's bandwidth), it is a DHT client;
- `client-only`: it cannot be dialled at all; it works over its own outbound connections (a sampler still
  generates, pushes groups and fetches weights), it is a DHT client, and nobody picks it as a weight holder or a
  send target.
A record without the field (a node of an older version, or one that could not check) reads `unknown` and is
treated as dialable, as every peer was before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PUBLIC, RELAYED, CLIENT_ONLY, UNKNOWN = "public", "relayed", "client-only", "unknown"
REACHABILITIES = (PUBLIC, RELAYED, CLIENT_ONLY, UNKNOWN)
HEALTH_KEY = "reachability"


def reachability_of(record: Any) -> str:
    """The reachability a peer record (a `PeerRecord` or its `summary()` dict) advertises; `unknown` if none."""
    health = record.get("health") if isinstance(record, Mapping) else getattr(record, "health", None)
    value = (health or {}).get(HEALTH_KEY)
    return value if value in REACHABILITIES else UNKNOWN


def dialable(record: Any) -> bool:
    """Whether another peer can open a connection to this one (directly or through its relay)."""
    return reachability_of(record) != CLIENT_ONLY


def by_dial_cost(records: Iterable[Any]) -> list[Any]:
    """The dialable records, direct ones first, relayed ones last (each relayed byte also crosses the relay);
    client-only ones are left out. Stable within each kind."""
    order = {PUBLIC: 0, UNKNOWN: 0, RELAYED: 1}
    return sorted((r for r in records if dialable(r)), key=lambda r: order[reachability_of(r)])


def with_reachability(health: Mapping[str, Any] | None, reachability: str | None) -> dict[str, Any]:
    """`health` with this node's reachability added (unchanged when it has none)."""
    out = dict(health or {})
    if reachability is not None:
        out[HEALTH_KEY] = reachability
    return out
