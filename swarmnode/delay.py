"""Delay injection for latency experiments (HeteroRL-style): hold weight updates and/or rollouts back.

A spec is a string: `fixed:S`, `lognormal:MU,SIGMA[,MAX]` (seconds = exp(N(MU, SIGMA)), capped at MAX) or
`weibull:SCALE,SHAPE[,MAX]`. This machine's kernel has no `netem`, so latency is injected by the application.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from swarmnode.errors import ExitCode, SwarmnodeError


class DelaySpecError(SwarmnodeError, ValueError):
    """A malformed --simulate-delay value; the message shows the accepted forms."""

    exit_code = ExitCode.USAGE


FORMS = "fixed:S | lognormal:MU,SIGMA[,MAX] | weibull:SCALE,SHAPE[,MAX] (seconds)"


@dataclass(frozen=True)
class DelayModel:
    """A distribution of delays in seconds."""

    kind: str
    a: float = 0.0
    b: float = 0.0
    cap: float = math.inf

    def sample(self, rng: random.Random) -> float:
        """One delay in seconds (>= 0, <= cap)."""
        if self.kind == "fixed":
            value = self.a
        elif self.kind == "lognormal":
            value = rng.lognormvariate(self.a, self.b)
        else:
            value = rng.weibullvariate(self.a, self.b)
        return max(0.0, min(value, self.cap))


def parse_delay(spec: str | None) -> DelayModel | None:
    """Parse a spec string; None or '' or 'none' means no delay."""
    if spec is None or spec.strip().lower() in ("", "none", "0", "off"):
        return None
    kind, _, args = spec.strip().partition(":")
    kind = kind.lower()
    try:
        values = [float(x) for x in args.split(",") if x.strip()]
    except ValueError:
        raise DelaySpecError(f"--simulate-delay {spec!r}: numbers expected ({FORMS})") from None
    if any(not math.isfinite(v) for v in values):
        raise DelaySpecError(f"--simulate-delay {spec!r}: numbers must be finite ({FORMS})")
    if kind == "fixed" and len(values) == 1 and values[0] >= 0:
        return DelayModel("fixed", values[0], cap=values[0])
    if kind in ("lognormal", "weibull") and len(values) in (2, 3):
        if values[1] <= 0 or (kind == "weibull" and values[0] <= 0):
            raise DelaySpecError(f"--simulate-delay {spec!r}: scale/shape/sigma must be > 0 ({FORMS})")
        cap = values[2] if len(values) == 3 else math.inf
        if cap < 0:
            raise DelaySpecError(f"--simulate-delay {spec!r}: MAX must be >= 0 ({FORMS})")
        return DelayModel(kind, values[0], values[1], cap)
    raise DelaySpecError(f"--simulate-delay {spec!r}: expected {FORMS}")
