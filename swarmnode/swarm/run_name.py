"""Which run a bootstrap serves, asked over one small stream: a `status` pointed at a bootstrap without the run's
id finds the run there (a DHT key is a hash: a run id cannot be read back from the keys a node sees)."""

from __future__ import annotations

import asyncio
import logging

from google.protobuf.wrappers_pb2 import BytesValue
from hivemind.p2p import P2P, P2PContext, PeerID

from swarmnode.protocol.codec import InvalidRecord, pack, str_field, unpack

logger = logging.getLogger(__name__)
RUN_NAME = "swarmnode.run/1"
MAX_ANSWER_BYTES = 256


async def serve_run_name(p2p: P2P, run_id: str) -> None:
    """Answer `RUN_NAME` requests with `run_id` (a bootstrap does)."""

    async def answer(request: BytesValue, context: P2PContext) -> BytesValue:
        return BytesValue(value=pack({"run_id": run_id}))

    await p2p.add_protobuf_handler(RUN_NAME, answer, BytesValue)


async def ask_run_name(p2p: P2P, peer: PeerID, timeout: float = 5.0) -> str | None:
    """The run `peer` serves, or None if it does not say (not a bootstrap, an older one, no answer)."""
    try:
        reply = await asyncio.wait_for(
            p2p.call_protobuf_handler(peer, RUN_NAME, BytesValue(value=b""), BytesValue), timeout
        )
        return str_field(unpack(reply.value, MAX_ANSWER_BYTES), "run_id", 64, 1)
    except (TimeoutError, InvalidRecord, Exception) as exc:  # noqa: B014 (p2pd raises many types)
        logger.debug("run name from %s: %s", peer, exc)
        return None
