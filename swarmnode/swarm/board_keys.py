"""Storing and reading learners' boards and curves in the run's DHT (`<run>/board/<learner peer id>`).

A learner stores its two signed records (`swarmnode.board.record`) under its own board key on its heartbeat;
only it can write there (`validator.board_key`). A reader asks for the board key of each learner it knows,
in one batched read; the signatures were checked by the validator on receipt and are checked again here.
"""

from __future__ import annotations

from hivemind.utils import get_dht_time

from swarmnode.board.record import BoardRecord, CurveRecord
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.swarm.dht import SwarmDHT, max_record_ttl
from swarmnode.swarm.validator import BOARD_LABEL, CURVES_LABEL, board_key, owned_subkey

BOARD_TTL_MIN_S = 60.0  # a board outlives its learner's last heartbeat by about a minute


def board_ttl(dht: SwarmDHT) -> float:
    return min(max_record_ttl(dht.cfg.network) - 1.0, max(BOARD_TTL_MIN_S, 2 * dht.record_ttl))


async def store_board(dht: SwarmDHT, board: BoardRecord, curves: CurveRecord) -> bool:
    """Store this learner's board and curves under its own board key; True if a DHT peer (or we) kept them."""
    me = dht.identity.peer_id
    if board.learner != me or curves.learner != me:
        raise ValueError("a learner publishes its own board only")
    key = board_key(dht.cfg.run_id, me)
    stored = await dht.node.store_many(
        [key, key],
        [board.encode(), curves.encode()],
        get_dht_time() + board_ttl(dht),
        subkeys=[owned_subkey(me, BOARD_LABEL), owned_subkey(me, CURVES_LABEL)],
    )
    return any(stored.values())


async def read_boards(dht: SwarmDHT, learners: list[str]) -> dict[str, tuple[BoardRecord | None, CurveRecord | None]]:
    """Each learner's board and curves (None where it has none, or an invalid one), in one batched read."""
    keys = {peer: board_key(dht.cfg.run_id, peer) for peer in learners}
    found = await dht._subkeys_many(list(keys.values())) if keys else {}
    out: dict[str, tuple[BoardRecord | None, CurveRecord | None]] = {}
    for peer, key in keys.items():
        subkeys = found.get(key, {})
        board = _decoded(BoardRecord.decode, subkeys.get(owned_subkey(peer, BOARD_LABEL)), peer)
        curves = _decoded(CurveRecord.decode, subkeys.get(owned_subkey(peer, CURVES_LABEL)), peer)
        out[peer] = (board, curves)
    return out


def _decoded(decode, payload: bytes | None, peer: str):
    if payload is None:
        return None
    try:
        record = decode(payload)
    except InvalidRecord:
        return None
    return record if record.learner == peer else None
