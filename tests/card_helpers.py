"""Signed run cards of the tiny-cpu run (`card_of`: any owner, version and settings) for the run card tests."""

from __future__ import annotations

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.node.host import next_card
from swarmnode.protocol.run_card import RunCard

BOOT = "/ip4/127.0.0.1/tcp/31337/p2p/12D3KooWFqCkwozuivmdDoCZAqW8aPcPrjHLXMD8wpfSWAeVKgjD"


def card_of(owner: Identity, version: int = 1, **sets: str) -> RunCard:
    cfg = load_config("tiny-cpu", [f"{k.replace('__', '.')}={v}" for k, v in sets.items()])
    card = next_card(cfg, owner, [BOOT], None)
    if version != 1:
        card.version = version
        card.signed(owner)
    return card
