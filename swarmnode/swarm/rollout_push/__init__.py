"""Rollout groups between peers over hivemind binary streams: send with acks and retries, receive with
validation, dedup, per-peer rate limits and bans, and a pull path for learners that joined late.

Why direct stream pushes and not p2pd's gossipsub (also for SAPO's broadcast mode): hivemind does not expose
gossipsub, the daemon silently drops messages over 1 MiB, and gossipsub has no acknowledgement, so a sender
cannot retry, back off, or learn that a learner refused a group (quota, stale). A push per destination gives
exactly-once delivery (ack + receiver dedup), per-peer backpressure, and p99 latency well under the 200 ms
target on loopback (bench/data-plane/data_plane.py); a swarm-wide broadcast is the same push to every peer that wants
rollouts, which at RL group rates (a few per second per sampler) costs little.

Wire format, both directions: frames of an 8-byte big-endian length and a payload.
- push stream `swarmnode/<run>/rollouts/1` (persistent): sender writes an encoded RolloutGroup, receiver answers
  {"id": group id or "", "status": reason, "v": the learner's policy version (optional), "c": the groups it
  invites from this sender now (optional: its credit, see `credit`)}. Final statuses: "ok",
  "duplicate", the buffer's own refusals ("quota", "stale", ...), "invalid"; retried after backoff:
  "rate_limited", "busy". After "oversized", "truncated" or "banned" the receiver closes the stream. The
  version in a learner's acks lets its samplers fetch that version at once (from the learner the stream
  authenticates, manifest signed by it) instead of at their next DHT look, so weights follow a fast learner
  within one ack (Echo's push-pull), not a heartbeat.
- pull stream `swarmnode/<run>/rollouts-pull/1`: learner writes {"since": unix time, "limit": n}; the sampler
  answers with up to n encoded groups from its recent ring, newer than `since`, then an empty frame; the learner
  writes {"op": "bye"} before anyone closes (closing right after the last write truncated QUIC streams).

Modules: `streams` (stream names, ack statuses, the polite close), `credit` (how many groups a learner invites:
`CreditPolicy`, the ack's credit field), `receive` (`RolloutReceiver`), `peer_guard` (what a receiver keeps per
peer: `TokenBucket` rate limits, `PeerBans`), `seen` (its journaled dedup memory), `send` (`RolloutSender`:
outboxes, acks, retries, the recent ring served to pullers).
"""

from swarmnode.swarm.rollout_push.peer_guard import PeerBans, TokenBucket
from swarmnode.swarm.rollout_push.receive import RolloutReceiver
from swarmnode.swarm.rollout_push.seen import SeenIds
from swarmnode.swarm.rollout_push.send import RolloutSender
from swarmnode.swarm.rollout_push.streams import CLOSING_STATUSES, RETRY_STATUSES, pull_protocol, push_protocol

__all__ = [
    "CLOSING_STATUSES",
    "PeerBans",
    "RETRY_STATUSES",
    "RolloutReceiver",
    "RolloutSender",
    "SeenIds",
    "TokenBucket",
    "pull_protocol",
    "push_protocol",
]
