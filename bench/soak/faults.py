"""The soak's seeded fault schedule: a pure function of (seed, duration), so a run can be repeated fault for fault.

Faults (times in seconds from the start of the run):
- `sampler_kill`: every `churn_every` s (+- half of it) a random churn sampler is SIGKILLed or SIGTERMed and
  started again 10-60 s later, mostly under the same identity, sometimes under a new one;
- `learner_kill`: the learner SIGKILLed and started again, every `learner_every` s;
- `bootstrap_kill`: the second bootstrap killed and started again on the same address;
- `freeze`: a sampler SIGSTOPped for `freeze_s`, then SIGCONTed;
- `net_cut`: the namespaced sampler's link down for `cut_s`, then up;
- `disk_full`: the small filesystem of the disk sampler filled for `full_s`, then emptied.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Fault:
    """One fault: `kind` hits `target` at `at`; it ends (restart, continue, link up, space back) at `end`."""

    at: float
    kind: str
    target: str
    end: float
    detail: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    """Who plays which part: the churn samplers, the frozen one, the namespaced one, the small-disk one."""

    churn: tuple[str, ...] = ("sampler3", "sampler4", "sampler5", "sampler6")
    frozen: str = "sampler2"
    namespaced: str = "sampler5"
    small_disk: str = "sampler6"
    churn_every: float = 60.0
    learner_every: float = 1800.0
    freeze_s: float = 120.0
    cut_s: float = 60.0
    full_s: float = 120.0
    warmup: float = 120.0  # no fault before this (the swarm is still starting)
    new_identity_p: float = 0.2


def schedule(seed: int, duration: float, plan: Plan = Plan()) -> list[Fault]:
    """The faults of a run of `duration` seconds, sorted by time; every fault ends before `duration` - 120 s (the
    last two minutes show the recovery). The special faults (freeze, cut, disk, bootstrap) sit at fixed
    fractions of the run; the churn samplers are never hit while a special fault holds them."""
    rng = random.Random(seed)
    last = duration - 120.0
    span = last - plan.warmup
    special = [
        Fault(plan.warmup + 0.25 * span, "freeze", plan.frozen, plan.warmup + 0.25 * span + plan.freeze_s),
        Fault(plan.warmup + 0.40 * span, "bootstrap_kill", "bootstrap2", plan.warmup + 0.40 * span + 20.0),
        Fault(plan.warmup + 0.55 * span, "net_cut", plan.namespaced, plan.warmup + 0.55 * span + plan.cut_s),
        Fault(plan.warmup + 0.70 * span, "disk_full", plan.small_disk, plan.warmup + 0.70 * span + plan.full_s),
    ]
    faults = [f for f in special if f.end <= last]
    t = plan.learner_every
    while t + 30.0 <= last:
        faults.append(Fault(t, "learner_kill", "learner", t + 15.0))
        t += plan.learner_every
    busy = {f.target: (f.at - 30.0, f.end + 30.0) for f in faults if f.target in plan.churn}
    down_until = {name: 0.0 for name in plan.churn}
    generation = {name: 0 for name in plan.churn}
    t = plan.warmup + rng.uniform(0.5, 1.5) * plan.churn_every
    while t < last:
        free = [n for n in plan.churn if down_until[n] <= t and not _within(t, busy.get(n))]
        if free:
            name = rng.choice(free)
            back = t + rng.uniform(10.0, 60.0)
            new = rng.random() < plan.new_identity_p
            generation[name] += new
            if back <= last and not _within(back, busy.get(name)):
                faults.append(
                    Fault(
                        t,
                        "sampler_kill",
                        name,
                        back,
                        {
                            "signal": rng.choice(["SIGKILL", "SIGTERM"]),
                            "new_identity": new,
                            "identity": generation[name],
                        },
                    )
                )
                down_until[name] = back
        t += rng.uniform(0.5, 1.5) * plan.churn_every
    return sorted(faults, key=lambda f: f.at)


def _within(t: float, window: tuple[float, float] | None) -> bool:
    return window is not None and window[0] <= t <= window[1]


def scaled_plan(duration: float) -> Plan:
    """The issue's plan for a run of `duration` s; a short run (the 15-minute CI soak) compresses the learner's
    kill period so that it still sees one, and the special faults to fit."""
    if duration >= 3600:
        return Plan()
    return Plan(
        learner_every=max(300.0, duration / 2.0),
        churn_every=60.0,
        freeze_s=min(120.0, duration / 10),
        cut_s=60.0,
        full_s=min(120.0, duration / 10),
        warmup=min(120.0, duration / 8),
    )
