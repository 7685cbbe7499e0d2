"""Who may hold a weight server's streams: caps per peer and in total, and a fair share among strangers.

Every open stream is a slot. A trusted peer (the run's designated learners; on a learner, the samplers whose work
passed its checks) may hold `max_per_peer`; a stranger `stranger_per_peer`, and all strangers together
`max_strangers`. A slot is *useful* while chunks move over it: a manifest or a have-map moves no weights, so a
peer that asks for them every few seconds is as idle as one that asks nothing.

When a new stream finds the slots full, it takes one over, as BitTorrent's optimistic unchoke does:
- a trusted peer takes the least recently useful stranger's slot at once;
- a stranger takes a slot from the address that holds the most stranger slots, if that address holds more than
  the newcomer's address will (within one address: from the key that holds the most); a slot of an address (or
  key) that will hold as many as the newcomer's rotates out only once it has not been useful for `evict_after`.
So a new stranger always gets a first slot from a flood, however many keys the flood has, and throwaway keys on
one address share that address's slots. An address is the IPv4 address, or the /64 of an IPv6 one; a relayed
stream (`/p2p-circuit`) is grouped by its key alone (the relay limits its addresses, see `swarm/relay_guard.py`).
"""

from __future__ import annotations

import collections
import ipaddress
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Slot:
    """One open stream."""

    peer: str
    address: str  # the fairness group of its address (see `address_group`)
    trusted: bool
    writer: Any  # closed when the slot is taken over
    useful_at: float = field(default_factory=time.monotonic)  # opened, or last served chunks
    evicted: bool = False


def address_group(peer: str, addr: str) -> str:
    """The group whose stranger slots are counted together: an IPv4 address, an IPv6 /64, else the peer itself
    (a relayed stream, or an address without an IP)."""
    parts = str(addr).split("/")
    if "p2p-circuit" in parts or len(parts) < 3 or parts[1] not in ("ip4", "ip6"):
        return f"peer:{peer}"
    try:
        ip = ipaddress.ip_address(parts[2])
    except ValueError:
        return f"peer:{peer}"
    if ip.version == 6:
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class SlotTable:
    """The open streams of one weight server and the rules for admitting a new one."""

    def __init__(
        self, *, max_total: int, max_per_peer: int, stranger_per_peer: int, max_strangers: int, evict_after: float
    ):
        self.max_total, self.max_per_peer = max_total, max_per_peer
        self.stranger_per_peer, self.max_strangers = min(stranger_per_peer, max_per_peer), max_strangers
        self.evict_after = evict_after
        self.slots: set[Slot] = set()
        self.by_peer: collections.Counter[str] = collections.Counter()  # all open streams
        self.strangers_by_address: collections.Counter[str] = collections.Counter()
        self.evicted = 0

    @property
    def strangers(self) -> int:
        """Stranger slots open now."""
        return sum(self.strangers_by_address.values())

    def admit(self, peer: str, address: str, trusted: bool, writer: Any) -> Slot | None:
        """A slot for a new stream (taking one over if the slots are full), or None: refused."""
        if self.by_peer[peer] >= (self.max_per_peer if trusted else self.stranger_per_peer):
            return None
        full = len(self.slots) >= self.max_total or (not trusted and self.strangers >= self.max_strangers)
        if full:
            victim = self._victim(peer, address, trusted)
            if victim is None:
                return None
            self.evict(victim)
        slot = Slot(peer, address, trusted, writer)
        self.slots.add(slot)
        self.by_peer[peer] += 1
        if not trusted:
            self.strangers_by_address[address] += 1
        return slot

    def _victim(self, peer: str, address: str, trusted: bool) -> Slot | None:
        strangers = [s for s in self.slots if not s.trusted]
        if not strangers:
            return None
        if trusted:
            return min(strangers, key=lambda s: s.useful_at)
        now = time.monotonic()
        own_address = self.strangers_by_address[address] + 1  # what the newcomer's address and key will hold
        own_peer = self.by_peer[peer] + 1

        def excess(s: Slot) -> int:
            if s.address != address:
                return self.strangers_by_address[s.address] - own_address
            return self.by_peer[s.peer] - own_peer

        fair = [s for s in strangers if (e := excess(s)) >= 1 or (e == 0 and now - s.useful_at >= self.evict_after)]
        return max(fair, key=lambda s: (excess(s), -s.useful_at)) if fair else None

    def evict(self, slot: Slot) -> None:
        """Take `slot` over: mark it, release it and close its stream."""
        slot.evicted = True
        self.evicted += 1
        self.release(slot)
        slot.writer.close()

    def release(self, slot: Slot) -> None:
        """The stream of `slot` ended (idempotent)."""
        if slot not in self.slots:
            return
        self.slots.discard(slot)
        for counter, key in (
            (self.by_peer, slot.peer),
            *(((self.strangers_by_address, slot.address),) if not slot.trusted else ()),
        ):
            counter[key] -= 1
            if not counter[key]:
                del counter[key]
