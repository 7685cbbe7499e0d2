"""The run card and the invite: a run's shared settings, signed by its owner, and the one string that finds them.

A `RunCard` holds the run id, a version, the owner's peer id, the bootstraps' addresses, the shared settings
(`swarmnode.config.shared`), the host's suggested local defaults, and digests of the model's and the task data's
source; the owner's Ed25519 key signs its canonical JSON. It travels in the run's DHT (`<run>/card`, stored by
whoever holds it: validity is the owner's signature, not the storer's) and on disk as JSON.

An `Invite` (`swarmnode1:<base64url>`) carries the run id, the bootstrap addresses and the owner's peer id: enough to
dial the run, fetch its card and check who signed it. A card is accepted only when signed by the invite's owner,
for the invite's run, and newer than the one held (`newest_card`).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from swarmnode.errors import UsageError
from swarmnode.identity import Identity, verify
from swarmnode.protocol.codec import MAX_VERSION, InvalidRecord, bytes_field, pack, unpack

CARD_FORMAT = 1
MAX_CARD_BYTES = 12 * 1024  # a DHT record's value holds at most 16 KiB with its framing and signature
_DOMAIN = b"swarmnode-run-card/1\n"  # a card signature is never valid as any other record's
INVITE_PREFIX = "swarmnode1:"
MAX_INVITE_BOOTSTRAPS = 16


@dataclass
class RunCard:
    """One version of a run's card (see the module docstring). `signature`: the owner's, over `body()`."""

    run_id: str
    version: int
    owner: str
    bootstraps: list[str]
    settings: dict[str, Any]
    defaults: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    created: float = 0.0
    format: int = CARD_FORMAT
    signature: bytes = b""

    def body(self) -> bytes:
        """The canonical bytes the owner signs: every field but the signature, as sorted compact JSON."""
        fields = asdict(self)
        fields.pop("signature")
        return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()

    def signed(self, owner: Identity) -> RunCard:
        """This card signed by `owner` (who must be its owner)."""
        if owner.peer_id != self.owner:
            raise ValueError("a card is signed by its owner only")
        self.created = self.created or time.time()
        self.signature = owner.sign(_DOMAIN + self.body())
        return self

    def check(self) -> RunCard:
        """Raise InvalidRecord unless the owner's signature is valid and the fields are sane; return self."""
        if self.format != CARD_FORMAT:
            raise InvalidRecord(f"card format {self.format} (this swarmnode reads {CARD_FORMAT})")
        if not 0 <= int(self.version) <= MAX_VERSION:
            raise InvalidRecord("card version out of range")
        if not verify(self.owner, _DOMAIN + self.body(), self.signature):
            raise InvalidRecord(f"card signature does not match its owner {self.owner[:16]}...")
        return self

    def encode(self) -> bytes:
        """The wire form: the signed body and the signature."""
        data = pack({"body": self.body(), "signature": self.signature})
        if len(data) > MAX_CARD_BYTES:
            raise ValueError(f"run card of {len(data)} bytes exceeds {MAX_CARD_BYTES}")
        return data

    @classmethod
    def decode(cls, data: bytes) -> RunCard:
        """Parse and check (signature included); raises only InvalidRecord."""
        obj = unpack(data, MAX_CARD_BYTES)
        return cls.from_body(bytes_field(obj, "body", MAX_CARD_BYTES), bytes_field(obj, "signature", 64, 64))

    @classmethod
    def from_body(cls, body: bytes, signature: bytes) -> RunCard:
        try:
            fields = json.loads(body)
            card = cls(**fields, signature=bytes(signature))
        except (ValueError, TypeError) as exc:
            raise InvalidRecord(f"malformed run card ({type(exc).__name__})") from None
        if not (
            isinstance(card.run_id, str)
            and isinstance(card.owner, str)
            and isinstance(card.version, int)
            and isinstance(card.bootstraps, list)
            and all(isinstance(b, str) for b in card.bootstraps)
            and isinstance(card.settings, dict)
            and isinstance(card.defaults, dict)
            and isinstance(card.sources, dict)
        ):
            raise InvalidRecord("malformed run card (field types)")
        if card.body() != body:
            raise InvalidRecord("run card body is not in canonical form")
        return card.check()

    def to_file(self) -> str:
        """JSON for the owner's card file (the signature in hex)."""
        return json.dumps({**json.loads(self.body()), "signature": self.signature.hex()}, indent=2, sort_keys=True)

    @classmethod
    def from_file(cls, text: str) -> RunCard:
        """A card from `to_file`'s JSON, checked; InvalidRecord if it is not one."""
        try:
            fields = json.loads(text)
            signature = bytes.fromhex(fields.pop("signature"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidRecord(f"not a run card file ({type(exc).__name__})") from None
        return cls.from_body(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode(), signature)

    def summary(self) -> dict[str, Any]:
        """What status and the dashboard show of the card."""
        s = self.settings
        return {
            "run_id": self.run_id,
            "version": self.version,
            "owner": self.owner,
            "model": s.get("model", {}).get("name"),
            "task": s.get("task", {}).get("name"),
            "learners": list(s.get("trust", {}).get("learner_keys", [])),
            "bootstraps": list(self.bootstraps),
        }


def newest_card(cards: list[RunCard], owner: str, run_id: str, above: int = -1) -> RunCard | None:
    """The newest card of `run_id` signed by `owner` with a version above `above` (None: none)."""
    mine = [c for c in cards if c.owner == owner and c.run_id == run_id and c.version > above]
    return max(mine, key=lambda c: c.version, default=None)


@dataclass(frozen=True)
class Invite:
    """What `swarmnode join <invite>` needs: the run, where to dial, and whose signature its card carries."""

    run_id: str
    owner: str
    bootstraps: tuple[str, ...]

    def encode(self) -> str:
        body = json.dumps(
            {"run": self.run_id, "owner": self.owner, "bootstraps": list(self.bootstraps)}, separators=(",", ":")
        ).encode()
        return INVITE_PREFIX + base64.urlsafe_b64encode(body).decode().rstrip("=")

    @classmethod
    def parse(cls, text: str) -> Invite:
        """The invite in `text`; UsageError (one line) if it is not one."""
        text = text.strip()
        hint = "(copy the whole `swarmnode join swarmnode1:...` line the host printed)"
        if not text.startswith(INVITE_PREFIX):
            raise UsageError(f"{text[:24]!r} is not an invite: an invite starts with {INVITE_PREFIX} {hint}")
        raw = text[len(INVITE_PREFIX) :]
        try:
            obj = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
            invite = cls(str(obj["run"]), str(obj["owner"]), tuple(str(b) for b in obj["bootstraps"]))
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise UsageError(f"the invite is damaged (cut short or mistyped?) {hint}") from None
        if not invite.bootstraps or len(invite.bootstraps) > MAX_INVITE_BOOTSTRAPS:
            raise UsageError(
                f"the invite names {len(invite.bootstraps)} bootstraps (1 to {MAX_INVITE_BOOTSTRAPS}) {hint}"
            )
        return invite

    @classmethod
    def of(cls, card: RunCard) -> Invite:
        return cls(card.run_id, card.owner, tuple(card.bootstraps))


def looks_like_invite(text: str | None) -> bool:
    """Whether a command's argument is meant as an invite (`swarmnode export SOURCE`: an invite or a directory)."""
    return bool(text) and str(text).strip().startswith(INVITE_PREFIX)
