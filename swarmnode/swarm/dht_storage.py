"""The local storage of a DHT node, bounded per key: a flood of records under one key cannot grow without end.

hivemind's `DHTLocalStorage` keeps every valid subkey a peer stores under a key until it expires. Subkeys are
owned (`swarmnode.swarm.validator`), but keys are free to make: 2,000 peer records from throwaway keys pushed a
run's real members out of DHT reads (each read returned and verified every record; a reply over p2pd's 4 MiB cap
is dropped and its server blacklisted). `CappedStorage` refuses a *new* subkey under a key that already holds
`max_subkeys` unexpired subkeys or whose values would pass `max_bytes`. A subkey it holds may always be
refreshed, and one it held within `remember_s` (a member whose record lapsed for a few missed heartbeats) is
taken back up to twice the caps, so the members that were there before a flood stay visible; a flood's records
leave when they expire (the validator caps every lifetime). A member that first joins while a key is full is
refused until the flood's records expire. Installed on a node by
`swarmnode.swarm.hivemind_compat.use_local_storage`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from hivemind.dht.routing import DHTID, BinaryDHTValue, Subkey
from hivemind.dht.storage import DHTLocalStorage, DictionaryDHTValue
from hivemind.utils import get_dht_time
from hivemind.utils.timed_storage import DHTExpiration

logger = logging.getLogger(__name__)

MAX_SUBKEYS_PER_KEY = 1024  # a run's peers key holds one subkey per member
MAX_BYTES_PER_KEY = 512 << 10  # twice this stays well under p2pd's 4 MiB cap on one reply, which covers all of a key
REMEMBER_S = 300.0  # how long a subkey that was held counts as a returning member's


class CappedStorage(DHTLocalStorage):
    """`DHTLocalStorage` that refuses new subkeys beyond `max_subkeys` or `max_bytes` of values per key (see the
    module docstring); `refused` counts them."""

    def __init__(
        self, max_subkeys: int = MAX_SUBKEYS_PER_KEY, max_bytes: int = MAX_BYTES_PER_KEY, remember_s: float = REMEMBER_S
    ):
        super().__init__()
        self.max_subkeys, self.max_bytes, self.remember_s = max_subkeys, max_bytes, remember_s
        self.refused = 0
        self._held: OrderedDict[tuple[DHTID, Subkey], float] = OrderedDict()  # (key, subkey) -> last stored

    def store_subkey(self, key: DHTID, subkey: Subkey, value: BinaryDHTValue, expiration_time: DHTExpiration) -> bool:
        held = self.get(key)
        if held is not None and isinstance(held.value, DictionaryDHTValue):
            last = self._held.get((key, subkey))
            scale = 2 if last is not None and get_dht_time() - last < self.remember_s else 1
            if not self._fits(held.value, subkey, len(value), scale):
                self.refused += 1
                if self.refused in (1, 10, 100) or self.refused % 1000 == 0:
                    logger.warning(
                        "DHT storage: refused %d new subkeys under full keys (at most %d subkeys and %d bytes per key)",
                        self.refused,
                        self.max_subkeys,
                        self.max_bytes,
                    )
                return False
        stored = super().store_subkey(key, subkey, value, expiration_time)
        if stored:
            self._remember(key, subkey)
        return stored

    def _fits(self, entries: DictionaryDHTValue, subkey: Subkey, size: int, scale: int) -> bool:
        """Whether `size` bytes under `subkey` keep `entries` within `scale` times the caps (a refresh replaces)."""
        others = sum(len(item.value) for other, item in entries.items() if other != subkey)  # expired ones dropped
        count_ok = subkey in entries or len(entries) < scale * self.max_subkeys
        return count_ok and others + size <= scale * self.max_bytes

    def _remember(self, key: DHTID, subkey: Subkey) -> None:
        self._held[key, subkey] = get_dht_time()
        self._held.move_to_end((key, subkey))
        while len(self._held) > 4 * self.max_subkeys:  # bounded: the oldest memories go first
            self._held.popitem(last=False)
