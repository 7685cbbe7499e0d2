"""Bytes each node's own network handlers move, counted inside the node: every hivemind unary protobuf call a
node makes (request out, response in) and answers (request in, response out), by handler name, per P2P host.

The DHT (`DHTProtocol.rpc_ping/rpc_store/rpc_find`: heartbeats, announcements, lookups) is the control plane.
What is counted is each message's protobuf size (`ByteSize`), the payload the node's code hands its p2pd: libp2p's
own framing, noise encryption and yamux headers are not in it (tens of bytes per message). Streams (weight
chunks, rollout pushes) are not unary calls and are counted by the roles themselves (`WeightServer.served_bytes`).

`install()` patches hivemind's `P2P` once per process (a lab mode: `swarmnode join` never calls it); `snapshot()`
returns {peer id: {handler: [bytes in, bytes out, calls]}}.
"""

from __future__ import annotations

import collections
from typing import Any

from hivemind.p2p import P2P

CONTROL_PREFIX = "DHTProtocol."  # the handlers whose bytes are the control plane
_counts: dict[str, dict[str, list[int]]] = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0, 0]))
_installed = False


def _count(peer: Any, handle: str, inbound: int, outbound: int) -> None:
    row = _counts[str(peer)][handle.split("::")[-1]]
    row[0] += inbound
    row[1] += outbound
    row[2] += 1


def install() -> None:
    """Count every unary protobuf call of every P2P host in this process (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    call, add = P2P._call_unary_protobuf_handler, P2P._add_protobuf_unary_handler

    async def counted_call(self, peer_id, handle_name, input, output_protobuf_type):
        response = await call(self, peer_id, handle_name, input, output_protobuf_type)
        _count(self.peer_id, handle_name, response.ByteSize(), input.ByteSize())
        return response

    async def counted_add(self, handle_name, handler, input_protobuf_type, balanced=False):
        async def counted(request, context):
            response = await handler(request, context)
            _count(self.peer_id, handle_name, request.ByteSize(), response.ByteSize())
            return response

        return await add(self, handle_name, counted, input_protobuf_type, balanced=balanced)

    P2P._call_unary_protobuf_handler = counted_call
    P2P._add_protobuf_unary_handler = counted_add


def snapshot(peer_id: str) -> dict[str, list[int]]:
    """{handler: [bytes in, bytes out, calls]} of one host so far."""
    return {k: list(v) for k, v in _counts.get(peer_id, {}).items()}


def control_bytes(by_handle: dict[str, list[int]]) -> tuple[int, int]:
    """(in, out) bytes of the control plane (the DHT's handlers) in a `snapshot`."""
    rows = [v for k, v in by_handle.items() if k.startswith(CONTROL_PREFIX)]
    return sum(r[0] for r in rows), sum(r[1] for r in rows)
