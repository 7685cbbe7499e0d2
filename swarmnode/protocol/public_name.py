"""Public names: the name a volunteer shows beside its key (`--public-name`), never trusted for anything.

A node checks its own name against the run's policy (`names` in the run card: allowed or not, longest length,
characters) before it announces `ready` (`check_public_name`: one line, exit code 2). A reader never trusts what
a record holds: `shown_name` keeps only the characters the policy allows (control and format characters, markup
and quotes become `?`, runs of spaces one space), cuts it to the policy's length and says whether it changed
anything, so a reader counts the names it had to mend. A record's name longer than `MAX_NAME_CHARS` is refused
with the whole record (`PeerRecord.decode`). Displays escape what they show (HTML on the run page; rich `Text`,
never markup, in the terminal).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from swarmnode.errors import UsageError

MAX_NAME_CHARS = 64  # what a peer record may carry at all; the run's policy may allow fewer
PUNCTUATION = frozenset(" ._-'!?#+@(),")
REPLACEMENT = "?"


@dataclass(frozen=True)
class NamePolicy:
    """The run's rules for public names (config section `names`)."""

    allowed: bool = True
    max_length: int = 32
    charset: str = "unicode"  # "unicode" or "ascii"

    @classmethod
    def of(cls, names) -> NamePolicy:
        """From a `NamesConfig` (config section `names`)."""
        return cls(bool(names.allowed), int(names.max_length), str(names.charset))


def allowed_char(char: str, charset: str) -> bool:
    """Whether `char` may appear in a public name under `charset` ("unicode": letters, marks and digits of any
    script; "ascii": A-Z, a-z, 0-9; both: space and `PUNCTUATION`)."""
    if char in PUNCTUATION:
        return True
    if charset == "ascii":
        return char.isascii() and char.isalnum()
    return unicodedata.category(char)[0] in "LMN"


def name_problem(name: str, policy: NamePolicy) -> str | None:
    """Why `name` breaks `policy` (None: it does not)."""
    if not policy.allowed:
        return "this run shows no public names (names.allowed is false in its card)"
    if not name.strip():
        return "a public name needs at least one letter or digit"
    if len(name) > policy.max_length:
        return f"{len(name)} characters, the run allows {policy.max_length} (names.max_length)"
    bad = sorted({c for c in name if not allowed_char(c, policy.charset)})
    if bad:
        shown = ", ".join(repr(c) if c.isprintable() else f"U+{ord(c):04X}" for c in bad[:5])
        return f"characters not allowed ({shown}): names.charset={policy.charset} allows letters, digits, space and .,_-'!?#+@()"
    if "  " in name or name != name.strip():
        return "no leading, trailing or double spaces"
    return None


def check_public_name(name: str | None, policy: NamePolicy) -> str:
    """The node's own name as it will advertise it ("" for none); `UsageError` naming the problem otherwise."""
    if name is None or name == "":
        return ""
    problem = name_problem(name, policy)
    if problem is not None:
        raise UsageError(f"--public-name {name[:40]!r}{'...' if len(name) > 40 else ''}: {problem}")
    return name


@dataclass(frozen=True)
class ShownName:
    """What a reader shows of a record's name, and whether it had to change (or hide) it."""

    text: str
    changed: bool


def shown_name(raw: str, policy: NamePolicy) -> ShownName:
    """The harmless form of a name read from someone's record (see the module docstring)."""
    if not raw:
        return ShownName("", False)
    if not policy.allowed:
        return ShownName("", True)
    out: list[str] = []
    for char in raw[: MAX_NAME_CHARS * 2]:
        if not allowed_char(char, policy.charset):
            char = " " if char.isspace() else REPLACEMENT
        if char == " " and (not out or out[-1] == " "):
            continue
        out.append(char)
    text = "".join(out).strip()[: policy.max_length].strip()
    return ShownName(text, text != raw)
