"""The learner's replay buffer: bounded, deduplicated, staleness-aware, with per-sampler quotas.

Staleness of a group is `version - group.policy_version` against the learner's current version. Groups
staler than `max_staleness` are refused on arrival and dropped when the version moves past them; groups
from a *future* version (which this learner never published) are refused. One sampler may hold at most
`quota` groups, so a fast or hostile sender cannot crowd out the rest. When full, the stalest group is
evicted. `draw` removes what it returns (each group is trained on once). Every outcome is counted.

`RolloutInbox` is the buffer's door for rollout delivery: whoever delivers (the swarm's `RolloutReceiver`, which
needs the buffer's verdict for its ack, or a local sampler through `send`, a `RolloutSink`) hands groups to it;
the learner loop draws from the buffer and, when it holds too few groups, waits in the inbox for the next arrival
instead of polling. With a `journal` (a swarm learner's `GroupJournal`), an accepted group is made `durable`
before it is acknowledged, and no group is accepted while the journal is over its hard limit (the learner is not
checkpointing).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Protocol, TypeVar

F = TypeVar("F", bound=Callable)
logger = logging.getLogger(__name__)


def _locked(method: F) -> F:
    """Run under the buffer's lock: the network thread adds while the training thread draws."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


ACCEPTED = "ok"
REASONS = ("ok", "duplicate", "quota", "stale", "future", "lineage", "evicted", "aged_out", "liar")


class _Group(Protocol):
    group_id: str
    sampler_id: str
    policy_version: int
    lineage: str

    def encode(self) -> bytes: ...


class AckJournal(Protocol):
    """What the inbox needs of a journal of acknowledged groups (`swarmnode.learner.journal.GroupJournal`)."""

    @property
    def closed(self) -> bool: ...

    @property
    def over_hard_limit(self) -> bool: ...

    def append(self, data: bytes) -> None: ...

    async def sync(self) -> None: ...


class ReplayBuffer:
    """Bounded store of rollout groups; see the module docstring for the policy."""

    def __init__(
        self,
        capacity: int,
        max_staleness: int,
        per_sampler_quota: float = 1.0,
        draw_order: str = "newest",
        lineage: str | None = None,
        version: int = 0,
        seen_ids: int | None = None,
    ):
        if capacity < 1 or max_staleness < 0 or not 0 < per_sampler_quota <= 1:
            raise ValueError("capacity >= 1, max_staleness >= 0 and 0 < per_sampler_quota <= 1 are required")
        if draw_order not in ("newest", "oldest"):
            raise ValueError(f"draw_order {draw_order!r}: expected newest or oldest")
        self.capacity, self.max_staleness, self.draw_order = capacity, max_staleness, draw_order
        self.quota = max(1, math.floor(per_sampler_quota * capacity))
        self.lineage, self.version = lineage, version
        self._groups: OrderedDict[str, _Group] = OrderedDict()  # arrival order
        self._per_sampler: Counter[str] = Counter()
        self._seen: OrderedDict[str, None] = OrderedDict()  # dedup memory, bounded
        self._seen_cap = seen_ids or 16 * capacity
        self.counters: Counter[str] = Counter()
        self.drawn = 0
        self.skipped: tuple[int, int, int] | None = None  # the last restart's (announced, checkpoint, resumed)
        self.replayed: set[str] = set()  # held groups replayed after a restart (drawn first)
        self.replay_outcome: Counter[str] = Counter()  # replayed groups "trained" (drawn) or "dropped"
        self.readmitted: set[str] = set()  # every group replayed since this buffer was made (drawn or not)
        self.arrivals: Callable[[_Group], object] | None = None  # told every group offered to `add` (seeded draws)
        self._lock = threading.RLock()

    @classmethod
    def from_config(cls, cfg, lineage: str | None = None, version: int = 0) -> ReplayBuffer:
        """A buffer sized and policed by a NodeConfig's learner and sync sections."""
        lc = cfg.learner
        return cls(lc.buffer_size, cfg.sync.max_staleness, lc.per_sampler_quota, lc.draw_order, lineage, version)

    @_locked
    def __len__(self) -> int:
        return len(self._groups)

    def staleness(self, group: _Group) -> int:
        """`version - group.policy_version`; for a claim made before a restart (see `skip_versions`), the versions
        trained since the restart plus how far below the checkpoint's weights the claim is."""
        claimed = int(group.policy_version)
        if self.skipped is not None and claimed <= self.skipped[0]:
            announced, checkpoint, resumed = self.skipped
            return self.version - resumed + checkpoint - min(claimed, checkpoint)
        return self.version - claimed

    @_locked
    def skip_versions(self, announced: int, checkpoint: int, resumed: int) -> None:
        """A learner restarted from the checkpoint of version `checkpoint` goes on at version `resumed`, above
        `announced`, the highest it announced before the crash (a number is never reused). Claims up to
        `announced` are judged by the weights the learner holds, not by the numbers it skipped: a claim between
        the checkpoint and `announced` (the weights of a lost branch) as if it were the checkpoint's. Only the
        latest restart is remembered (an older one's claims then count the numbers it skipped: staler, not
        fresher, than they are)."""
        if resumed > checkpoint:
            self.skipped = (int(announced), int(checkpoint), int(resumed))

    @_locked
    def narrow_staleness(self, max_staleness: int, why: str) -> None:
        """Accept claims at most `max_staleness` versions old from now on (said once in the log, with `why`)."""
        if max_staleness < self.max_staleness:
            logger.warning(
                "the learner accepts groups at most %d versions stale (sync.max_staleness=%d): %s",
                max_staleness,
                self.max_staleness,
                why,
            )
            self.max_staleness = max_staleness
            self.set_version(self.version)

    @_locked
    def drop_sampler(self, sampler_id: str) -> int:
        """Remove every held group of `sampler_id` (a sampler caught lying); how many, counted `liar`."""
        mine = [gid for gid, g in self._groups.items() if g.sampler_id == sampler_id]
        for gid in mine:
            self._remove(gid, drawn=False)
        self.counters["liar"] += len(mine)
        return len(mine)

    @_locked
    def add(self, group: _Group) -> str:
        """Offer one group; returns "ok" or the reason it was refused (and counts it); `arrivals` is told first."""
        if self.arrivals is not None:
            self.arrivals(group)
        return self._admit(group, self._judge(group))

    @_locked
    def readmit(self, group: _Group) -> str:
        """Offer a group this learner acknowledged before a restart (replayed from its journal): judged by its
        staleness and lineage, not by the dedup memory (which already holds it) nor by the quota or the capacity
        (it was within them when acknowledged: the buffer may hold more than its capacity until it is drawn).
        A group already in the buffer is still a duplicate."""
        reason = "duplicate" if group.group_id in self._groups else self._judge(group, dedup=False, quota=False)
        if self._admit(group, reason, evict=False) == ACCEPTED:
            self.replayed.add(group.group_id)
            self.readmitted.add(group.group_id)
        return reason

    @_locked
    def held(self) -> list[_Group]:
        """The groups in the buffer now (not yet drawn), in arrival order."""
        return list(self._groups.values())

    def _admit(self, group: _Group, reason: str, evict: bool = True) -> str:
        self.counters[reason] += 1
        if reason != ACCEPTED:
            return reason
        self._remember(group.group_id)
        if evict and len(self._groups) >= self.capacity:
            self._evict_stalest()
        self._groups[group.group_id] = group
        self._per_sampler[group.sampler_id] += 1
        return reason

    def _judge(self, group: _Group, dedup: bool = True, quota: bool = True) -> str:
        if dedup and (group.group_id in self._seen or group.group_id in self._groups):
            return "duplicate"
        if self.lineage is not None and group.lineage != self.lineage:
            return "lineage"
        tau = self.staleness(group)
        if tau < 0:
            return "future"
        if tau > self.max_staleness:
            return "stale"
        if quota and self._per_sampler[group.sampler_id] >= self.quota:
            return "quota"
        return ACCEPTED

    def _remember(self, group_id: str) -> None:
        self._seen[group_id] = None
        while len(self._seen) > self._seen_cap:
            self._seen.popitem(last=False)

    def _remove(self, group_id: str, drawn: bool = True) -> _Group:
        """Take a group out (drawn for training, or dropped: `drawn=False`); a replayed one's fate is counted."""
        group = self._groups.pop(group_id)
        if group_id in self.replayed:
            self.replayed.discard(group_id)
            self.replay_outcome["trained" if drawn else "dropped"] += 1
        self._per_sampler[group.sampler_id] -= 1
        if self._per_sampler[group.sampler_id] <= 0:
            del self._per_sampler[group.sampler_id]
        return group

    def _evict_stalest(self) -> None:
        victim = min(self._groups.values(), key=lambda g: g.policy_version)  # oldest arrival among equals
        self._remove(victim.group_id, drawn=False)
        self.counters["evicted"] += 1

    @_locked
    def set_version(self, v: int) -> None:
        """Move the learner's version; drops (and counts as aged_out) groups now staler than the bound."""
        self.version = int(v)
        for gid in [gid for gid, g in self._groups.items() if self.staleness(g) > self.max_staleness]:
            self._remove(gid, drawn=False)
            self.counters["aged_out"] += 1

    @_locked
    def draw(self, n: int, leave: Callable[[_Group], bool] | None = None) -> list[_Group]:
        """Remove and return up to `n` groups: those replayed after a restart (`readmit`) first (they were
        acknowledged before the crash: fresher arrivals must not starve them until they age out), then newest
        policy version first, or oldest arrival first. `leave(group)`, asked of each candidate in that order,
        True keeps it in the buffer for a later draw (`learner.check_budget`)."""
        replayed = [gid for gid in self._groups if gid in self.replayed]
        rest = [gid for gid in self._groups if gid not in self.replayed] if replayed else list(self._groups)
        if self.draw_order == "newest":  # newest version first; among equal versions the latest arrival first
            rest = sorted(reversed(rest), key=lambda gid: -self._groups[gid].policy_version)
        picked: list[str] = []
        for gid in replayed + rest:
            if len(picked) >= n:
                break
            if leave is None or not leave(self._groups[gid]):
                picked.append(gid)
        self.drawn += len(picked)
        return [self._remove(gid) for gid in picked]

    def dropped_fraction(self) -> float:
        """Share of everything offered that was lost to staleness (refused stale + aged out)."""
        offered = sum(self.counters[r] for r in REASONS if r not in ("evicted", "aged_out"))
        lost = self.counters["stale"] + self.counters["aged_out"]
        return lost / offered if offered else 0.0

    @_locked
    def stats(self) -> dict:
        """Size, counters by reason, per-sampler holdings and the stale-dropped fraction."""
        return {
            "size": len(self._groups),
            "capacity": self.capacity,
            "version": self.version,
            "drawn": self.drawn,
            "counters": {r: self.counters[r] for r in REASONS},
            "per_sampler": dict(self._per_sampler),
            "dropped_fraction": self.dropped_fraction(),
        }

    @_locked
    def state_dict(self) -> dict:
        """Position for a checkpoint: version, counters and dedup memory (held groups are not saved)."""
        return {
            "version": self.version,
            "counters": dict(self.counters),
            "drawn": self.drawn,
            "seen": list(self._seen),
            "skipped": list(self.skipped or []),
        }

    @_locked
    def load_state_dict(self, state: dict) -> None:
        self.version = int(state["version"])
        self.counters = Counter({str(k): int(v) for k, v in state["counters"].items()})
        self.drawn = int(state["drawn"])
        self._seen = OrderedDict((str(g), None) for g in state["seen"][-self._seen_cap :])
        self.skipped = tuple(int(x) for x in state["skipped"]) if state.get("skipped") else None  # type: ignore[assignment]


class RolloutInbox:
    """Admits groups into `buffer` (from any thread) and wakes a learner waiting for them."""

    def __init__(self, buffer: ReplayBuffer, journal: AckJournal | None = None) -> None:
        self.buffer, self.journal = buffer, journal
        self._arrived = threading.Condition()

    def admit(self, group: _Group) -> str:
        """Put `group` in the buffer; its status ("ok", "duplicate", "stale", "quota", "busy"...), as an ack
        tells it."""
        if self.journal is not None and (self.journal.closed or self.journal.over_hard_limit):
            return "busy"  # stopping, or accept no more than a learner that is not checkpointing can keep
        status = self.buffer.add(group)
        with self._arrived:
            self._arrived.notify_all()
        return status

    async def durable(self, accepted: list[tuple[_Group, bytes]]) -> None:
        """Journal accepted groups' wire bytes and wait until they are on disk (before their acks; one sync)."""
        if self.journal is not None:
            for _, body in accepted:
                self.journal.append(body)
            await self.journal.sync()

    def send(self, group: _Group) -> None:
        """The `RolloutSink` form of `admit` (a local sampler needs no verdict)."""
        self.admit(group)

    def wait(self, groups: int, timeout: float) -> bool:
        """Block until the buffer holds at least `groups` groups (True) or `timeout` seconds pass (False)."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self.buffer) >= groups, timeout)
