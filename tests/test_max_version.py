"""One MAX_VERSION for every record that carries a policy version (a JSON-exact integer, 2**53)."""

from __future__ import annotations

import time

import pytest

from swarmnode.identity import Identity
from swarmnode.protocol.announce import VersionAnnouncement
from swarmnode.protocol.codec import MAX_VERSION, InvalidRecord
from swarmnode.protocol.peer import PeerRecord


def test_peer_record_and_announcement_share_the_version_bound():
    key = Identity.generate()
    assert (
        PeerRecord.decode(PeerRecord.create(key, role="sampler", version=MAX_VERSION).encode()).version == MAX_VERSION
    )
    with pytest.raises(InvalidRecord):
        PeerRecord.decode(PeerRecord.create(key, role="sampler", version=MAX_VERSION + 1).encode())
    ok = VersionAnnouncement(key.peer_id, MAX_VERSION, {}, time.time())
    assert VersionAnnouncement.decode(ok.encode()).version == MAX_VERSION
    with pytest.raises(InvalidRecord):
        VersionAnnouncement.decode(VersionAnnouncement(key.peer_id, MAX_VERSION + 1, {}, time.time()).encode())
