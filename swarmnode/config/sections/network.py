"""The `network` section: where the node listens, whom it dials first, and how patient it is."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from swarmnode.config.sections.base import Section


class NetworkConfig(Section):
    """Where the node listens, whom it dials first, and how patient it is."""

    initial_peers: list[str] = Field(default_factory=list, description="bootstrap multiaddrs (/ip4/.../p2p/Qm...)")
    host_maddrs: list[str] = Field(default_factory=lambda: ["/ip4/0.0.0.0/tcp/0"], description="listen multiaddrs")
    announce_maddrs: list[str] = Field(default_factory=list, description="public multiaddrs to advertise (behind NAT)")
    identity_path: str | None = Field(None, description="key file; default under the user's data dir")
    startup_timeout: float = Field(60.0, gt=0, le=3600, description="seconds to start p2pd and reach a bootstrap")
    nat_port_map: bool = Field(True, description="ask the router for a port mapping (UPnP)")
    auto_nat: bool = Field(True, description="let peers tell whether this node is reachable")
    use_relay: bool = Field(True, description="reach and be reached through relays when not directly reachable")
    client_mode: bool = Field(False, description="DHT client only: reads and writes records, serves none")
    heartbeat_interval: float = Field(5.0, gt=0, le=600, description="seconds between peer-record refreshes")
    missed_beats_to_expire: int = Field(
        3, ge=1, le=100, description="heartbeats a peer record outlives its last refresh by"
    )
    dht_bucket_size: int = Field(
        8,
        ge=5,
        le=64,
        description="Kademlia's k: peers a DHT node keeps per routing "
        "bucket, lists in each lookup reply and keeps in a lookup's beam (hivemind's default is 20, BitTorrent's DHT "
        "uses 8): a lookup's calls and reply bytes stop growing with the run past about this many nodes",
    )
    peer_shards: int = Field(
        64,
        ge=1,
        le=4096,
        description="DHT keys the run's peer records are sharded over "
        "(by a prefix of the peer id's hash); every node of a run must use the same count",
    )
    peer_sample: int = Field(
        64,
        ge=1,
        le=100_000,
        description="peer records a sampler reads per look for weight "
        "holders (whole shards, in random order, until this many; the learners are read apart)",
    )
    max_message_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, le=1 << 30, description="largest frame accepted from a peer"
    )
    push_window: int = Field(
        8,
        ge=1,
        le=64,
        description="rollout groups a sampler writes to a learner back to "
        "back before reading their acks (1: one group per round trip)",
    )
    reachability: Literal["auto", "public", "private"] = Field(
        "auto",
        description="auto: at join, ask the bootstraps to dial this node back; public / private: skip the "
        "check (private: join as a DHT client and take a relay reservation)",
    )
    reachability_timeout: float = Field(8.0, gt=0, le=120, description="seconds the join's dial-back check may take")
    reachability_recheck: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="seconds between dial-back rechecks "
        "after join (0: none); a relay reservation is looked at every heartbeat",
    )
    relay_wait: float = Field(
        10.0,
        gt=0,
        le=300,
        description="seconds an unreachable node waits for a relay reservation before it joins client-only",
    )
    relay_service: bool | None = Field(
        None,
        description="relay for nodes that cannot be dialled (circuit relay "
        "v2); None: on for bootstraps, off for other nodes",
    )
    relay_max_reservations: int = Field(128, ge=1, le=100_000, description="relay: nodes holding a reservation")
    relay_max_circuits: int = Field(16, ge=1, le=10_000, description="relay: open relayed connections per peer")
    relay_data_limit_mb: float = Field(
        4096.0,
        gt=0,
        le=1e7,
        description="relay: MB relayed per connection and direction before it is reset (the peers then reconnect)",
    )
    relay_time_limit_s: float = Field(
        1800.0, gt=0, le=86400 * 7, description="relay: seconds a relayed connection lives before it is reset"
    )
    relay_conns_per_address: int = Field(
        8,
        ge=0,
        le=100_000,
        description="relay (root, iptables): open "
        "connections to a relaying bootstrap per IPv4 address or IPv6 /64 (0: no "
        "per-address limits)",
    )
    relay_conns_per_prefix: int = Field(
        32, ge=0, le=100_000, description="relay (root, iptables): open connections per IPv4 /24 or IPv6 /48 (0: none)"
    )
    relay_new_conns_per_minute: int = Field(
        6,
        ge=0,
        le=100_000,
        description="relay (root, iptables): new "
        "connections per minute per address, after a burst of "
        "relay_conns_per_address (0: no rate limit)",
    )
    relay_stranger_conns: int = Field(
        0,
        ge=0,
        le=100_000,
        description="relay (root, iptables): open "
        "connections of all addresses no established peer of the run connects from, "
        "together (0: no such cap); under relay_max_reservations, the rest stay for "
        "nodes in the run before a flood",
    )
    relay_known_after_s: float = Field(
        600.0,
        ge=0,
        le=86400 * 7,
        description="relay: seconds a key's live record "
        "must have been seen before its addresses count as known "
        "(relay_stranger_conns)",
    )
