"""Keeping a run's card in its DHT: the host's bootstrap re-reads the owner's card file and stores the card on
every heartbeat, so a card update (a new file, written by `swarmnode host --update`) reaches the DHT within one."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.run_card import RunCard
from swarmnode.swarm.membership import Membership

logger = logging.getLogger(__name__)


def read_card_file(path: Path) -> RunCard:
    """The card in the owner's card file, checked; InvalidRecord or OSError if there is none."""
    return RunCard.from_file(Path(path).read_text())


async def serve_card(member: Membership, path: Path, stop: asyncio.Event) -> None:
    """Store the card of `path` in the run's DHT now and on every heartbeat until `stop` (a newer file: its card)."""
    served = -1
    while not stop.is_set():
        try:
            card = read_card_file(path)
            if card.run_id != member.cfg.run_id:
                raise InvalidRecord(f"the card is for run {card.run_id}, this bootstrap serves {member.cfg.run_id}")
            stored = await member.dht.store_card(card)
            if card.version != served:
                logger.info("serving run card v%d (%s)", card.version, "stored" if stored else "not stored yet")
                served = card.version
        except FileNotFoundError:  # the host writes it once the bootstrap's addresses are known
            pass
        except (OSError, InvalidRecord) as exc:
            logger.warning("run card %s: %s", path, exc)
        except Exception as exc:  # a DHT hiccup: next beat
            logger.info("storing the run card failed: %s", exc)
        try:
            await asyncio.wait_for(stop.wait(), member.cfg.network.heartbeat_interval)
        except TimeoutError:
            pass
