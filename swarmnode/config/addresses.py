"""A quick check of `--initial-peers` before anything heavy is imported: each one must look like a multiaddr that
ends in /p2p/<peer id>, the id a base58 multihash (sha2-256, or an identity hash of a public key). The full parse
(`swarmnode.swarm.p2p.parse_initial_peer`, hivemind's) still runs before a node dials; this one lets a typo
answer at once instead of after torch and hivemind load.
"""

from __future__ import annotations

from swarmnode.errors import UsageError

_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_HINT = "(copy the `initial-peers:` line that `swarmnode bootstrap` prints)"
_SHA2_256, _IDENTITY = 0x12, 0x00  # multihash codes a libp2p peer id uses


def _base58_decode(text: str) -> bytes | None:
    number = 0
    for char in text:
        digit = _BASE58.find(char)
        if digit < 0:
            return None
        number = number * 58 + digit
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    return b"\x00" * (len(text) - len(text.lstrip("1"))) + body


def is_peer_id(text: str) -> bool:
    """A base58 multihash of the kind libp2p peer ids are: sha2-256 (`Qm...`) or identity (`12D3KooW...`)."""
    raw = _base58_decode(text)
    if raw is None or len(raw) < 3:
        return False
    code, length = raw[0], raw[1]
    return code in (_SHA2_256, _IDENTITY) and length == len(raw) - 2 and (code != _SHA2_256 or length == 32)


def check_initial_peer(text: str) -> None:
    """Raise UsageError (exit code 2) unless `text` looks like `/ip4/1.2.3.4/tcp/31337/p2p/12D3...`."""
    parts = text.split("/")
    if not text.startswith("/") or len(parts) < 5 or parts[-2] != "p2p" or not all(parts[1:]):
        raise UsageError(f"initial peer {text!r} is not a multiaddr ending in /p2p/<peer id> {_HINT}")
    if not is_peer_id(parts[-1]):
        raise UsageError(f"initial peer {text!r}: {parts[-1]!r} is not a peer id {_HINT}")


def check_initial_peers(peers: list[str]) -> None:
    """`check_initial_peer` of each."""
    for text in peers:
        check_initial_peer(text)
