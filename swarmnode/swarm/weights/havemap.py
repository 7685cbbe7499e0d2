"""Have-maps: which chunks of a version a holder has, as bitmaps (bit i = byte i // 8, bit i % 8).

A holder answers a `have` request with two bitmaps of the version's chunks back to back: those it holds, then
those on their way to it (requested by its own fetch); empty if it knows nothing of the version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

_NONZERO = re.compile(rb"[^\x00]")


def bitmap(indices: Iterable[int], n: int) -> bytes:
    """A bitmap of `n` bits with bit i set for each index."""
    bits = bytearray((n + 7) // 8)
    for i in indices:
        bits[i >> 3] |= 1 << (i & 7)
    return bytes(bits)


def bit(bits: bytes, i: int) -> bool:
    """Whether bit `i` is set."""
    return bool(bits[i >> 3] >> (i & 7) & 1)


def changed_bits(a: bytes, b: bytes) -> Iterator[int]:
    """Indices whose bit differs between two bitmaps of equal length (O(length) bytes, O(1) per difference)."""
    diff = (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(len(a), "little")
    for match in _NONZERO.finditer(diff):  # zero bytes are skipped at C speed
        byte_index, byte = match.start(), diff[match.start()]
        while byte:
            low = byte & -byte
            yield byte_index * 8 + low.bit_length() - 1
            byte ^= low
