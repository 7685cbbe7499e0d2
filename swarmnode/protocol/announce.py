"""VersionAnnouncement: a learner's small DHT pointer saying "version v exists; here is where its manifest is".

Stored under `<run>/versions` with subkey `newest@<learner peer id>` (each learner's newest replaces its last);
the DHT validator checks that the learner signed it (swarmnode.swarm.validator). The pointer is a small map of
scalars (e.g. manifest hash, total bytes, lineage) so the key stays far below p2pd's 4 MiB message cap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from swarmnode.protocol.codec import MAX_VERSION, InvalidRecord, float_field, int_field, pack, str_field, unpack
from swarmnode.protocol.peer import small_map

MAX_ANNOUNCEMENT_BYTES = 4 * 1024


@dataclass
class VersionAnnouncement:
    """Learner `peer_id` published policy `version`; `pointer` tells fetchers where the manifest is."""

    peer_id: str
    version: int
    pointer: dict[str, Any] = field(default_factory=dict)
    timestamp: float = 0.0

    def encode(self) -> bytes:
        return pack(
            {"peer_id": self.peer_id, "version": self.version, "pointer": self.pointer, "timestamp": self.timestamp}
        )

    @classmethod
    def decode(cls, data: bytes) -> VersionAnnouncement:
        """Parse and bound-check; raises only InvalidRecord."""
        obj = unpack(data, MAX_ANNOUNCEMENT_BYTES)
        if set(obj) != {"peer_id", "version", "pointer", "timestamp"}:
            raise InvalidRecord(f"announcement fields {sorted(obj)[:6]} are not the expected four")
        return cls(
            peer_id=str_field(obj, "peer_id", 128, 8),
            version=int_field(obj, "version", 0, MAX_VERSION),
            pointer=small_map(obj["pointer"], "pointer", allow_lists=True),
            timestamp=float_field(obj, "timestamp", 0.0, 1e11),
        )
