"""Whether a node still reaches any of its run's bootstraps: a node whose bootstraps are all gone says so, once,
and what to do; and says again when one answers.

The DHT's heartbeat re-dials the initial peers it lost (`SwarmDHT.reconnect_initial_peers`); `BootstrapWatch`
counts how long none of them has answered. A host restarted on the same address (`swarmnode host` keeps its
bootstrap's port and key) comes back within a heartbeat and the node carries on; one that moved needs its new
invite.
"""

from __future__ import annotations

import time
from collections.abc import Callable

GONE_AFTER_S = 60.0  # none of the bootstraps answering for this long is said


class BootstrapWatch:
    """See the module docstring: `seen(answering, total)` after each re-dial returns the line to log, or None."""

    def __init__(self, gone_after: float = GONE_AFTER_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.gone_after, self.clock = gone_after, clock
        self.gone_since: float | None = None
        self.said = False

    def seen(self, answering: int, total: int) -> str | None:
        """`answering` of the `total` bootstraps are connected now; the line to log when that news is worth it."""
        now = self.clock()
        if total == 0:
            return None
        if answering:
            back, self.gone_since, self.said = self.said, None, False
            return (
                f"a bootstrap of the run answers again ({answering} of {total}): the node is back in its run"
                if back
                else None
            )
        self.gone_since = now if self.gone_since is None else self.gone_since
        if self.said or now - self.gone_since < self.gone_after:
            return None
        self.said = True
        return (
            f"none of the run's {total} bootstraps has answered for {now - self.gone_since:.0f} s (is the host "
            "down, or did its address change?): this node keeps re-dialling them and works on with the peers it "
            "knows; if the host has moved, join again with its new invite"
        )
