"""The node's Ed25519 key pair on disk: its libp2p peer id, and the signatures on every record it sends.

The key file is libp2p's protobuf `PrivateKey` (type Ed25519, 64 bytes: seed + public key), so the same file is
passed to p2pd as its identity and the peer id the daemon announces is the one computed here. Ed25519 peer ids
embed the public key (identity multihash, `12D3KooW...`), so a signature can be checked from the peer id alone.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import base58
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from swarmnode.config import NodeConfig
from swarmnode.errors import ExitCode, SwarmnodeError

SIGNATURE_BYTES = 64
ED25519 = 1  # libp2p's KeyType.Ed25519 (crypto.proto)


class IdentityError(SwarmnodeError, RuntimeError):
    """An identity file that cannot be read, created or used; the message says which and why."""

    exit_code = ExitCode.USAGE


def encode_key(key_type: int, data: bytes) -> bytes:
    """libp2p's `PublicKey`/`PrivateKey` protobuf (field 1 key type, field 2 data), written without protobuf:
    hivemind's generated module would import hivemind, and with it torch, before an invite or key is read."""
    return bytes([0x08, key_type, 0x12]) + _varint(len(data)) + data


def decode_key(blob: bytes) -> tuple[int, bytes]:
    """(key type, data) of a libp2p key protobuf; ValueError if `blob` is not one."""
    key_type, data, at = -1, b"", 0
    while at < len(blob):
        tag, at = _read_varint(blob, at)
        if tag == 0x08:
            key_type, at = _read_varint(blob, at)
        elif tag == 0x12:
            size, at = _read_varint(blob, at)
            if at + size > len(blob):
                raise ValueError("truncated key data")
            data, at = blob[at : at + size], at + size
        else:
            raise ValueError(f"unexpected field tag {tag}")
    if key_type < 0:
        raise ValueError("no key type")
    return key_type, data


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


def _read_varint(blob: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while at < len(blob) and shift < 64:
        byte = blob[at]
        value, at, shift = value | (byte & 0x7F) << shift, at + 1, shift + 7
        if not byte & 0x80:
            return value, at
    raise ValueError("truncated varint")


def _raw_public(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def peer_id_from_public_key(raw_public_key: bytes) -> str:
    """libp2p peer id (base58) of a raw 32-byte Ed25519 public key: identity multihash of the protobuf key."""
    proto = encode_key(ED25519, raw_public_key)
    return base58.b58encode(bytes([0x00, len(proto)]) + proto).decode()


def public_key_from_peer_id(peer_id: str) -> bytes:
    """The raw Ed25519 public key inside an Ed25519 peer id; IdentityError for any other kind of id."""
    try:
        raw = base58.b58decode(peer_id)
    except ValueError as exc:
        raise IdentityError(f"peer id {peer_id[:16]!r} is not base58") from exc
    if len(raw) < 2 or raw[0] != 0x00 or raw[1] != len(raw) - 2:
        raise IdentityError(f"peer id {peer_id[:16]!r} does not embed a public key")
    try:
        key_type, data = decode_key(raw[2:])
    except ValueError as exc:
        raise IdentityError(f"peer id {peer_id[:16]!r} holds no valid public key") from exc
    if key_type != ED25519 or len(data) != 32:
        raise IdentityError(f"peer id {peer_id[:16]!r} is not an Ed25519 peer id")
    return bytes(data)


@functools.lru_cache(maxsize=4096)
def _verifier(peer_id: str) -> Ed25519PublicKey:
    """The public key object of a peer id (cached: a learner verifies every group a sampler sends)."""
    return Ed25519PublicKey.from_public_bytes(public_key_from_peer_id(peer_id))


def verify(peer_id: str, data: bytes, signature: bytes) -> bool:
    """True if `signature` over `data` was made by the key behind Ed25519 `peer_id`; never raises."""
    if not isinstance(signature, (bytes, bytearray)) or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        _verifier(peer_id).verify(bytes(signature), data)
        return True
    except (IdentityError, InvalidSignature, ValueError):
        return False


@dataclass(frozen=True)
class Identity:
    """A loaded key pair with its peer id."""

    private_key: Ed25519PrivateKey
    path: Path | None = None

    @property
    def public_key(self) -> bytes:
        return _raw_public(self.private_key.public_key())

    @property
    def peer_id(self) -> str:
        return peer_id_from_public_key(self.public_key)

    def sign(self, data: bytes) -> bytes:
        """Ed25519 signature (64 bytes) over `data`."""
        return self.private_key.sign(data)

    def libp2p_key_bytes(self) -> bytes:
        """The key in libp2p's protobuf form, as p2pd reads it with `-id`."""
        seed = self.private_key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return encode_key(ED25519, seed + self.public_key)

    @classmethod
    def generate(cls) -> Identity:
        """A fresh key pair, not saved anywhere (tests, throwaway clients)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: str | Path) -> Identity:
        """Read a libp2p Ed25519 key file; IdentityError naming the file if it is not one."""
        path = Path(path).expanduser()
        try:
            blob = path.read_bytes()
        except OSError as exc:
            raise IdentityError(f"identity file {path}: cannot read ({exc.strerror})") from None
        try:
            key_type, data = decode_key(blob)
        except ValueError:
            raise IdentityError(f"identity file {path}: not a libp2p private key") from None
        if key_type != ED25519 or len(data) not in (32, 64):
            raise IdentityError(f"identity file {path}: expected an Ed25519 key (key type {key_type})")
        return cls(Ed25519PrivateKey.from_private_bytes(bytes(data[:32])), path)

    @classmethod
    def load_or_create(cls, path: str | Path) -> Identity:
        """Reuse the key at `path`, or create it (parents too) with mode 0600 on first use."""
        path = Path(path).expanduser()
        if path.exists():
            return cls.load(path)
        identity = cls(Ed25519PrivateKey.generate(), path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(identity.libp2p_key_bytes())
        except FileExistsError:  # created concurrently by another process: use theirs
            return cls.load(path)
        except OSError as exc:
            raise IdentityError(f"identity file {path}: cannot create ({exc.strerror})") from None
        return identity


def identity_for(cfg: NodeConfig, default_name: str) -> Identity:
    """The node's persistent identity: `network.identity_path`, else `<data dir>/<default_name>`."""
    path = cfg.network.identity_path or cfg.resolved_data_dir() / default_name
    return Identity.load_or_create(path)


def node_data_dir(cfg: NodeConfig, identity: Identity) -> Path:
    """This node's own directory: `data_dir` when set, else `<SWARMNODE_HOME>/<run>/<peer id>`, so two nodes on
    one machine never share a checkpoint, a weight store or a steps file."""
    if cfg.data_dir:
        return Path(cfg.data_dir).expanduser()
    return cfg.resolved_data_dir() / identity.peer_id
