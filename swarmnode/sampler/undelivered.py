"""A sampler whose groups nobody takes stops generating, and says why.

Pacing (`pacing.Pacer`) bounds what waits for an ack, not what is answered with a refusal: a learner that refuses
every group (made with weights not of its line, too stale) answers at once, and in `sync.pacing: outbox` mode a
learner that never answers only fills the outbox. `DeliveryGuard` bounds both, whatever the pacing mode: once
`limit` groups were made since the last one a learner acknowledged, generation stops. It is tried again with one
batch after `probe_s` seconds (doubling up to `probe_cap_s`), or at once when something that could change the
answer happens (`reset`: a version loaded, the learners changed). An ack ends the stop.

`why_undelivered` turns what the sender and the follower saw into the one line the sampler prints, with what to
change, and the short reason its health's `paused` advertises. Network-free (the role hands the counts in).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

UNDELIVERED_MIN = 128  # groups made without an ack before a sampler stops (4 batches when those are bigger)
PROBE_S, PROBE_CAP_S = 30.0, 300.0
DELIVERED = ("ok", "duplicate")


def undelivered_limit(batch: int) -> int:
    """Groups a sampler makes without an ack before it stops: more than a window of acks can be behind."""
    return max(UNDELIVERED_MIN, 4 * batch)


@dataclass
class DeliveryGuard:
    """See the module docstring. `allow(made, acked)` before each batch: False while stopped."""

    limit: int
    probe_s: float = PROBE_S
    probe_cap_s: float = PROBE_CAP_S
    clock: Callable[[], float] = time.monotonic
    stops: int = 0  # times generation stopped
    base: int = 0  # groups made when the last ack (or reset) was seen
    acked: int = 0
    stopped_at: float | None = None
    wait_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.wait_s = self.probe_s

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None

    def allow(self, made: int, acked: int) -> bool:
        """Whether the next batch may be made: True after an ack, within the limit, or when a probe is due."""
        if acked > self.acked:
            self.acked, self.base = acked, made
            self.stopped_at, self.wait_s = None, self.probe_s
            return True
        if made - self.base < self.limit:
            return True
        now = self.clock()
        if self.stopped_at is None:
            self.stopped_at = now
            self.stops += 1
            return False
        if now - self.stopped_at < self.wait_s:
            return False
        self.base = made - self.limit + 1  # one more batch: a probe
        self.stopped_at, self.wait_s = now, min(self.probe_cap_s, 2 * self.wait_s)
        return True

    def reset(self, made: int) -> None:
        """Something changed (a version loaded, other learners): go on generating, with a full `limit` again."""
        self.base, self.stopped_at, self.wait_s = made, None, self.probe_s

    def next_try_s(self) -> float:
        """Seconds until the next probe (0 when not stopped)."""
        return 0.0 if self.stopped_at is None else max(0.0, self.stopped_at + self.wait_s - self.clock())


@dataclass(frozen=True)
class Evidence:
    """What a sampler knows about why its groups were not taken."""

    made: int  # groups made since the last ack
    statuses: Mapping[str, int]  # learners' answers since the last ack, by status
    learners: int  # learners it sends to
    version_loaded: bool  # a version of a learner is loaded (not only the preset's own weights)
    fetch_error: str | None = None  # the last failed version fetch, if any
    push_error: str | None = None  # the last failed push (unreachable, timed out), if any
    use_relay: bool = True


REFUSALS = {
    "lineage": "made with weights that are not the learner's own",
    "stale": "too stale",
    "future": "tagged with a version the learner has not made",
    "quota": "over this sampler's quota at the learner",
    "banned": "this sampler is banned by the learner",
    "liar": "their claimed log-probs failed the learner's spot check",
}


def why_undelivered(e: Evidence) -> tuple[str, str]:
    """(the line to print, the short `paused` reason) for a sampler whose last `e.made` groups nobody took."""
    refused = Counter({s: n for s, n in e.statuses.items() if s not in DELIVERED and n > 0})
    if refused:
        top, n = refused.most_common(1)[0]
        what = REFUSALS.get(top, f"answered {top!r}")
        counts = ", ".join(f"{s} {k}" for s, k in refused.most_common(3))
        line = f"the learners refused them ({counts}): {what}"
        if top == "lineage" and not e.version_loaded:
            fetch = f": {e.fetch_error}" if e.fetch_error else ""
            line += (
                f"; no version of the learner is loaded here{fetch}; check that this node can fetch from it "
                "(`swarmnode status`: its version and reachability)"
            )
        elif top == "stale":
            fetch = f" ({e.fetch_error})" if e.fetch_error else ""
            line += f"; this node does not load the learner's versions fast enough{fetch}"
        return line, f"undelivered: refused ({top})"
    if not e.learners:
        return "no learner to send them to", "undelivered: no learner"
    error = f" (last: {e.push_error})" if e.push_error else ""
    hint = (
        "set network.use_relay=true here: a learner behind a NAT is reached only through a relay"
        if not e.use_relay
        else "check with `swarmnode status` that the learner is public or relayed (not client-only) and that the "
        "bootstrap relays (network.relay_service=true)"
    )
    return f"no learner answered{error}; {hint}", "undelivered: no learner answered"


def stop_line(e: Evidence, next_try_s: float) -> str:
    """The line a sampler prints when it stops generating."""
    line, _ = why_undelivered(e)
    return (
        f"sampler: stopped generating: {e.made} groups made and none acknowledged: {line}; next try in "
        f"{next_try_s:.0f} s"
    )
