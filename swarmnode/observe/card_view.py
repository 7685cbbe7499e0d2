"""The run card in `status <invite>` and `dashboard <invite>`: its summary in the document, an `old_card` warning per
node that runs an older card version, the lines above the status table and the dashboard's card panel.

A node that joined by invite names the card version it runs in its record's `software` field
and the end of its owner's peer id (`swarmnode/0.1.0 card/3/AbCdEfGh`; older nodes: `card/3`); `with_card` compares
that with the card the DHT holds now: an older version, or a card of another owner (whatever its version), is
flagged.
"""

from __future__ import annotations

from typing import Any

from rich.panel import Panel
from rich.text import Text

from swarmnode.observe.status import read_status
from swarmnode.protocol.run_card import RunCard, newest_card
from swarmnode.swarm.membership import Membership


def card_version_of(software: str) -> int | None:
    """The card version a peer record's `software` field names (`swarmnode/0.1.0 card/3` -> 3; None: not said)."""
    return card_of(software)[0]


def card_of(software: str) -> tuple[int | None, str | None]:
    """(card version, end of its owner's peer id) a peer record's `software` field names (`... card/3/AbCdEfGh`
    -> (3, "AbCdEfGh"); an older node's `card/3` -> (3, None); (None, None): not said)."""
    _, found, tail = software.partition(" card/")
    version, _, owner = tail.partition("/")
    return (int(version), owner or None) if found and version.isdigit() else (None, None)


def with_card(doc: dict[str, Any], card: RunCard) -> dict[str, Any]:
    """A status document with the run's card, and a warning for each node that runs an older card version or a
    card of another owner."""
    doc["card"] = card.summary()
    doc["alerts"] = [a for a in doc["alerts"] if a["kind"] != "old_card"]
    for peer in doc["peers"]:
        version, owner = card_of(peer.get("software", ""))
        if version is None:
            continue
        if owner is not None and not card.owner.endswith(owner):
            why = f"runs card v{version} of another owner (...{owner}), not the run's v{card.version} of {card.owner}"
        elif version < card.version:
            why = f"runs card v{version}, the run's is v{card.version}: it has not taken the update"
        else:
            continue
        doc["alerts"].append(
            {
                "kind": "old_card",
                "severity": "warning",
                "peer_id": peer["peer_id"],
                "message": f"{peer['peer_id']} ({peer['role']}) {why}",
            }
        )
    return doc


class CardStatus:
    """Status documents with the run's card as the DHT holds it now (newer versions by its owner taken), for a
    view that polls (the dashboard); with no card, plain status documents."""

    def __init__(self, card: RunCard | None) -> None:
        self.card = card

    async def read(self, member: Membership) -> dict[str, Any]:
        doc = await read_status(member)
        if self.card is None:
            return doc
        cards = await member.dht.cards()
        self.card = newest_card(cards, self.card.owner, self.card.run_id, above=self.card.version) or self.card
        return with_card(doc, self.card)


def format_card(summary: dict[str, Any]) -> str:
    """The card's lines above the status table."""
    learners = ", ".join(summary["learners"]) or "none"
    return "\n".join(
        [
            f"card v{summary['version']} of run {summary['run_id']}, owner {summary['owner']}",
            f"  model {summary['model']}, task {summary['task']}; learners: {learners}",
            f"  bootstraps: {', '.join(summary['bootstraps'])}",
        ]
    )


def card_panel(doc: dict[str, Any]) -> Panel:
    """The dashboard's card panel: the card's lines, yellow with a count when nodes run an older version."""
    old = sum(a["kind"] == "old_card" for a in doc["alerts"])
    text = Text(format_card(doc["card"]))
    if old:
        text.append(f"\n{old} node(s) run an older card version (see alerts)", style="bold yellow")
    return Panel(text, title=f"run card v{doc['card']['version']}", border_style="yellow" if old else "blue")
