"""Credits: how many more rollout groups a learner invites, told in its acks, so that samplers make no more
than it trains on within the staleness bound.

Why: a learner draws the newest groups first, so any standing surplus (groups held in its buffer beyond one
step's draw, or waiting in samplers' outboxes) is left behind by fresher arrivals until it ages past
`sync.max_staleness` and is thrown away; generating it was wasted work, and the groups thrown away are not a
fair sample (long completions take longer to make and arrive later).

Learner side, `CreditPolicy`: a target number of groups held. The room below it is shared among the senders
heard from within `active_window` seconds, rounded up, and told to each in its acks (`"c"`); at the target the
door is "full" (a push is held by its sender and resent shortly). The target adapts between one step's draw
(`floor`) and `cap` (`credit_target`: half of what the learner draws within the staleness bound, or
`learner.buffer_high_water`). Before each step (`ready`) the learner looks at what it holds: too few groups for
a step (its samplers are slow or far away: more must be in flight to keep it busy) raises the target by a
step's draw, once per wait; a held group more than `aging` versions behind (a surplus the newest-first draw
keeps passing over, on its way to aging out) sets it back to one step's draw, so no new groups come in until
the learner has drawn the old ones.

Turns: with more senders heard than groups of room (a learner taking 8 groups a step from 100 samplers), a share
of the room rounds to nothing, and every sampler holds a one-group probe that the door answers "full" until there
is room: whoever's resend lands first after a step would win, and a slow or far sampler could lose every race.
So then the room goes by turns: the senders whose last admitted group is the oldest (or who never had one) are
`in_turn`, as many as there are groups of room; only they are invited (credit 1) and let through the door, the
others are held "full" until their turn comes. With S senders and a step of P groups, a sender waits about S / P
steps at most. A sender held "full" is told how long to wait before it pushes again (`turn_wait`, the ack's
`"w"`): about half the steps until its turn, from its place in the queue and the learner's step interval, so a
learner with S senders waiting is asked again a few times per turn each, not S times every 50 ms (each push
carries its whole group); the head of the queue is told nothing and comes back after its own short wait.

Strangers (`probation`): keys the learner has not yet proven (on spot-check probation) queue apart from the
established ones and share a bounded part of the room while an established sender is heard: `probation_share` of it (at least one
group while their share of the groups kept is under `probation_share`); with none heard, the whole room. Within each queue a key first heard is placed behind those already served (never served first), so
throwaway keys cannot jump the queue by being new. A turn is taken only by a group the learner keeps (`settle`):
a push refused after the door for a reason the sender earned (`counts_against`: a future version, a stale one
from a key on probation) moves its key to the back of its queue and is struck by the receiver; one refused for
the learner's reasons (busy, quota, a duplicate) keeps its place. A banned key is forgotten (`forget`).

Sender side (`RolloutSender`): each destination's last told credit minus the groups still waiting for its ack
is what it invites now. A sampler generates what is invited, up to a batch (`sampler.pacing.Pacer`), and with
nothing invited a one-group probe when nothing of its own is outstanding (its ack brings a new credit; a
learner with no room holds it "full" until it has).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

MAX_CREDIT = 1 << 20  # a told credit above this is a malformed ack's, ignored
MAX_TURN_WAIT_S = 30.0  # the longest wait a "full" ack tells (and a sender obeys)
TURN_WAIT_SHARE = 0.5  # a sender is told half its expected wait: early is one refused push, late an idle slot


def credit_target(prompts_per_step: int, publish_every: int, max_staleness: int, high_water: int = 0) -> int:
    """The most groups a learner invites to be held or in flight: `high_water` if set, else half of what it
    draws within the staleness bound (`prompts_per_step` per step, `publish_every` steps per version,
    `max_staleness` versions: the other half is left for its samplers' lag); never more than that whole, never
    less than one step's draw."""
    within_bound = prompts_per_step * publish_every * max(1, max_staleness)
    return max(prompts_per_step, min(high_water or within_bound // 2, within_bound))


STRUCK_REFUSALS = ("future", "invalid")  # refused after the door, the sender's doing whatever its standing
STRUCK_ON_PROBATION = ("stale",)  # ... and these from a key on probation (an established sampler may lag)


def counts_against(status: str, on_probation: bool) -> bool:
    """Whether a push refused after the door with `status` counts against its key (a strike, and its place in
    the turn queue taken): a version the learner never made, or a key on probation too stale to train."""
    return status in STRUCK_REFUSALS or (on_probation and status in STRUCK_ON_PROBATION)


_NOT_SERVED = object()


class CreditPolicy:
    """The learner's credits: `full()` for the receiver's door, `grant(peer)` for each ack, `ready()` before
    each step, `settle(peer, kept, against)` once the door's pass has a verdict (see the module docstring).
    `held()` is the number of groups the learner holds now; the target starts at `floor` (one step's draw);
    `probation(peer)`: whether `peer` is a key on probation (queued apart, with `probation_share` of the room);
    `clock` is injectable for tests."""

    def __init__(
        self,
        floor: int,
        cap: int,
        held: Callable[[], int],
        oldest_behind: Callable[[], int] = lambda: 0,
        aging: int = 1,
        active_window: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        probation: Callable[[str], bool] = lambda peer: False,
        probation_share: float = 0.25,
    ):
        if not 1 <= floor <= cap or active_window <= 0 or aging < 0 or not 0 <= probation_share <= 1:
            raise ValueError("1 <= floor <= cap, aging >= 0, active_window > 0 and 0 <= probation_share <= 1")
        self.floor, self.cap, self.held, self.active_window, self.clock = floor, cap, held, active_window, clock
        self.oldest_behind, self.aging = oldest_behind, aging
        self.probation, self.probation_share = probation, probation_share
        self.target = floor
        self._starving = False  # the last `ready` found too few groups for a step
        self._aging = False  # the last `ready` found a held group more than `aging` versions behind
        self._heard: dict[str, float] = {}  # sender -> when it last pushed
        self._served: dict[str, int] = {}  # sender -> serial of its last kept group (or of when it was first heard)
        self._passing: dict[str, object] = {}  # sender -> its `_served` before a door pass not yet settled
        self._serial = 0
        self.kept = self.kept_probation = 0  # groups kept (`settle`), and those of keys on probation
        self._swept = -float("inf")  # when `senders` last forgot the quiet ones
        self._turn: tuple[int, frozenset[str]] | None = None  # (room, senders in turn), until something changes
        self._last_ready: float | None = None
        self.step_s: float | None = None  # seconds a step takes, moving average (`turn_wait`; waits for data not in)

    def ready(self) -> None:
        """The learner is about to draw a step (`floor` groups): adapt the target to what it holds now."""
        now = self.clock()
        if self._last_ready is not None and not self._starving:  # the last call found a step's draw: a step's time
            took = now - self._last_ready
            self.step_s = took if self.step_s is None else 0.8 * self.step_s + 0.2 * took
        self._last_ready = now
        starving, aging = self.held() < self.floor, self.oldest_behind() > self.aging
        if starving and not self._starving:
            self.target = min(self.cap, self.target + self.floor)
        elif aging:
            self.target = self.floor
        self._starving, self._aging = starving, aging
        self._turn = None  # probation may have ended for some keys meanwhile

    def full(self) -> bool:
        """True while the learner holds its target: pushes are answered "full" (held by the sender)."""
        return self.held() >= self.target

    def senders(self) -> int:
        """Senders heard from within `active_window` seconds (the others are forgotten)."""
        now = self.clock()
        if now - self._swept < self.active_window / 20:  # a sweep costs a pass over every sender: not per push
            return len(self._heard)
        self._swept, cutoff = now, now - self.active_window
        gone = [p for p, t in self._heard.items() if t < cutoff]
        for peer in gone:
            del self._heard[peer]
        if gone:
            self._turn = None
        if len(self._served) > 4 * len(self._heard) + 1024:  # bounded: forget the long-gone senders' turns
            self._served = {p: t for p, t in self._served.items() if p in self._heard}
        return len(self._heard)

    def forget(self, peer: str) -> None:
        """`peer` was banned: out of the turn queues (a returning key is heard anew, at the back)."""
        if self._heard.pop(peer, None) is not None:
            self._turn = None
        self._passing.pop(peer, None)

    def _hear(self, peer: str) -> None:
        if peer not in self._heard:
            self._turn = None
            if peer not in self._served:  # first heard: behind everyone served so far (never served first)
                self._serial += 1
                self._served[peer] = self._serial
        self._heard[peer] = max(self.clock(), self._heard.get(peer, 0.0))  # (a told wait keeps it heard)

    def _rooms(self, room: int) -> tuple[int, int, list[str], list[str]]:
        """(room of the established senders, room of those on probation, the established, those on probation)."""
        self.senders()
        new: list[str] = []
        old: list[str] = []
        for p in self._heard:
            (new if self.probation(p) else old).append(p)
        if not new or not old:
            return (room, 0, old, new) if old else (0, room, old, new)
        bound = int(self.probation_share * room)
        if bound == 0 and room > 0 and self.kept_probation <= self.probation_share * self.kept:
            bound = 1  # a small room: newcomers get a group now and then, `probation_share` of them in all
        share = min(len(new), bound)
        return room - share, share, old, new

    def _in_turn(self, peer: str, room: int) -> bool:
        """Whether `peer` is among the senders of its queue (established or on probation) whose turn it is: served
        longest ago, as many as its queue's room (see the module docstring)."""
        if self._turn is None or self._turn[0] != room:
            old_room, new_room, old, new = self._rooms(room)
            turn: set[str] = set()
            for members, share in ((old, old_room), (new, new_room)):
                turn.update(members if len(members) <= share else heapq.nsmallest(share, members, key=self._place))
            self._turn = (room, frozenset(turn))
        return peer in self._turn[1]

    def _place(self, peer: str) -> int:
        return self._served.get(peer, -1)

    def in_turn(self, peer: str) -> bool:
        """The door's question for a push from `peer` (False: answer it "full"): there is room, and it is
        `peer`'s turn in its queue. A True answer holds its turn until `settle` (kept: taken; refused: kept,
        unless the refusal counts against it)."""
        self._hear(peer)
        room = self.target - self.held()
        if room <= 0 or not self._in_turn(peer, room):
            return False
        self._passing.setdefault(peer, self._served.get(peer, _NOT_SERVED))
        self._serial += 1
        self._served[peer] = self._serial
        self._turn = None
        return True

    def settle(self, peer: str, kept: bool, against: bool = False) -> None:
        """The verdict on a group of `peer` that passed the door: kept (its turn is taken), refused `against` it
        (`counts_against`: its turn is taken too, for nothing), or refused for the learner's own reasons (its
        place in the queue comes back, unless another of its groups was kept meanwhile)."""
        if kept:
            self.kept += 1
            self.kept_probation += bool(self.probation(peer))
        before = self._passing.pop(peer, _NOT_SERVED)
        if kept or against or before is _NOT_SERVED:
            return
        assert isinstance(before, int)
        self._served[peer] = before
        self._turn = None

    def turn_wait(self, peer: str) -> float:
        """Seconds `peer`, just answered "full", should wait before it pushes again: 0 (its own short wait) near
        the head of its queue or before two steps have been timed; else `TURN_WAIT_SHARE` of the steps until its
        turn (the groups of senders ahead of it in its queue beyond its queue's room now, its queue's share of a
        step's draw a step) times the step interval, at most `MAX_TURN_WAIT_S`. It stays heard meanwhile."""
        if self.step_s is None or peer not in self._heard:
            return 0.0
        room = max(0, self.target - self.held())
        old_room, new_room, old, new = self._rooms(room)
        mine, queue = (new, new_room) if peer in set(new) else (old, old_room)
        place, ahead, before = self._place(peer), 0, True
        for other in mine:  # the queue's order (`_in_turn`): served longest ago first, then heard first
            if other == peer:
                before = False
                continue
            served = self._place(other)
            ahead += served < place or (before and served == place)
        split = old and new  # each queue gets its share of a step's draw
        per_step = max(1, int(self.floor * (queue / room if room and split else 1)))
        steps = (ahead - queue) // per_step
        if steps <= 0:
            return 0.0
        wait = min(MAX_TURN_WAIT_S, TURN_WAIT_SHARE * steps * self.step_s)
        self._heard[peer] = max(self._heard[peer], self.clock() + wait)
        return wait

    def grant(self, peer: str) -> int:
        """The credit told to `peer` (who just pushed): its share of its queue's room, rounded up; with more
        senders in its queue than groups of room, 1 while it is `peer`'s turn and 0 otherwise."""
        self._hear(peer)
        room = max(0, self.target - self.held())
        old_room, new_room, old, new = self._rooms(room)
        members, share = (new, new_room) if peer in set(new) else (old, old_room)
        if len(members) > share:
            return int(share > 0 and self._in_turn(peer, room))
        return -(-share // max(1, len(members)))


def pacing_credits(
    cfg,
    held: Callable[[], int],
    oldest_behind: Callable[[], int],
    probation: Callable[[str], bool] = lambda peer: False,
) -> CreditPolicy | None:
    """A learner's `CreditPolicy` from its NodeConfig (`sync.pacing`, `learner.buffer_high_water`; a held group
    more than half `sync.max_staleness` behind is aging; keys on `probation` share `trust.probation_share` of
    the room), or None with `sync.pacing: outbox`. `held()`: groups held; `oldest_behind()`: versions the oldest
    of them is behind (0 with none)."""
    if cfg.sync.pacing != "credits":
        return None
    lc = cfg.learner
    return CreditPolicy(
        lc.prompts_per_step,
        credit_target(lc.prompts_per_step, lc.publish_every, cfg.sync.max_staleness, lc.buffer_high_water),
        held,
        oldest_behind,
        aging=cfg.sync.max_staleness // 2,
        probation=probation,
        probation_share=cfg.trust.probation_share,
    )


def told_credit(ack: dict) -> int | None:
    """The credit an ack tells (its `"c"`), or None when it tells none or a malformed one."""
    credit = ack.get("c")
    if isinstance(credit, int) and not isinstance(credit, bool) and 0 <= credit <= MAX_CREDIT:
        return credit
    return None


def told_wait(ack: dict) -> float:
    """The seconds a "full" ack tells its sender to wait before pushing again (its `"w"`), 0.0 when it tells none
    or a malformed one; at most `MAX_TURN_WAIT_S`."""
    wait = ack.get("w")
    if isinstance(wait, (int, float)) and not isinstance(wait, bool) and 0 <= wait <= MAX_TURN_WAIT_S:
        return float(wait)
    return 0.0
