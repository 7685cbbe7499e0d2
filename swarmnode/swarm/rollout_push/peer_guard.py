"""What a receiver keeps per peer at its door: a token bucket for the rate limit, and strikes that ban a peer
which keeps sending bad data."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable


class TokenBucket:
    """`rate` tokens per second, at most `burst` saved up."""

    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class PeerBans:
    """Strikes per peer: `strikes_to_ban` of them within `ban_seconds` get the peer ignored for `ban_seconds`
    (`on_ban(peer)` is told each ban)."""

    def __init__(self, strikes_to_ban: int, ban_seconds: float, on_ban: Callable[[str], None] | None = None):
        self.strikes_to_ban, self.ban_seconds = strikes_to_ban, ban_seconds
        self.on_ban = on_ban
        self._strikes: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self._banned_until: dict[str, float] = {}

    def is_banned(self, peer: str) -> bool:
        """Whether `peer` is ignored now (a ban that ran out is forgotten)."""
        until = self._banned_until.get(peer)
        if until is None:
            return False
        if time.monotonic() >= until:
            del self._banned_until[peer]
            return False
        return True

    def recent_offenders(self) -> list[str]:
        """Peers struck within the last `ban_seconds` (banned or not), most recent first."""
        now = time.monotonic()
        last = {p: d[-1] for p, d in self._strikes.items() if d and d[-1] >= now - self.ban_seconds}
        for peer, until in self._banned_until.items():
            if until > now:
                last[peer] = max(last.get(peer, 0.0), until - self.ban_seconds)
        return sorted(last, key=lambda p: -last[p])

    def strike(self, peer: str) -> bool:
        """Count one strike against `peer`; True when it bans the peer now."""
        now = time.monotonic()
        strikes = self._strikes[peer]
        strikes.append(now)
        while strikes and strikes[0] < now - self.ban_seconds:
            strikes.popleft()
        if len(strikes) >= self.strikes_to_ban and not self.is_banned(peer):
            self._banned_until[peer] = now + self.ban_seconds
            strikes.clear()
            if self.on_ban is not None:
                self.on_ban(peer)
            return True
        return False
