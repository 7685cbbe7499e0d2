"""Old learner configuration names, mapped to the TRL-style ones with a warning (once per old name).

Before the rename `learner.loss_type` chose the loss family (gepo | gspo | grpo); it now means token aggregation,
as in TRL, and the family is `importance_sampling_level` (group | sequence | token). `loss_type: gepo` or `gspo`
can only be the old meaning and is mapped. `loss_type: grpo` is valid in both: with no
`importance_sampling_level` beside it, it is read the old way (token-level weights, i.e. GRPO — also what it
means in TRL, whose default level is token), with a warning saying so.

`kl_coef` (the learner-sampler KL) is now `cppo_beta`. `beta` named it for a while; it now means TRL's KL to a
frozen reference model (a TRL user's `beta: 0.04` is what TRL makes of it): `beta > 0` warns once that its
meaning changed and names `cppo_beta`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("swarmnode.config")

# old key -> new key (values carried over unchanged)
DEPRECATED_LEARNER_KEYS = {
    "kl_coef": "cppo_beta",
    "token_aggregation": "loss_type",
    "defensive_lambda": "gepo_defensive_lambda",
    "defensive_schedule": "gepo_defensive_schedule",
    "group_scope": "gepo_group_scope",
}
OLD_LOSS_FAMILIES = {"gepo": "group", "gspo": "sequence"}
_warned: set[str] = set()


_held: list[list[str]] = []  # while `held_warnings` is open: the warnings it holds back


def warn_once(key: str, message: str) -> None:
    """Log `message` as a warning the first time `key` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        if _held:
            _held[-1].append(message)
        else:
            log.warning("%s", message)


@contextlib.contextmanager
def held_warnings() -> Iterator[None]:
    """Hold back the config's advice while the block runs; logged after it, unless it raised (the error alone)."""
    _held.append([])
    try:
        yield
    except BaseException:
        _held.pop()
        raise
    for message in _held.pop():
        if _held:
            _held[-1].append(message)
        else:
            log.warning("%s", message)


def _warn(key: str, message: str) -> None:
    warn_once(key, f"learner.{key} is deprecated: {message}")


def map_deprecated_learner_keys(data: Any) -> Any:
    """A copy of the learner section's dict with old names replaced by new ones (other inputs unchanged)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if out.get("token_aggregation") == "sequence":  # the old name of TRL's "grpo" aggregation
        out["token_aggregation"] = "grpo"
    old_family = out.get("loss_type")
    family_meaning = old_family in OLD_LOSS_FAMILIES or (
        old_family == "grpo" and "importance_sampling_level" not in out
    )
    if old_family in OLD_LOSS_FAMILIES:
        _warn(
            "loss_type",
            f"loss_type={old_family} is read as importance_sampling_level="
            f"{OLD_LOSS_FAMILIES[old_family]} (loss_type now means token aggregation, as in TRL)",
        )
        out["importance_sampling_level"] = OLD_LOSS_FAMILIES[old_family]
        del out["loss_type"]
    elif old_family == "grpo" and "importance_sampling_level" not in out:
        _warn(
            "loss_type=grpo",
            "without importance_sampling_level it is read as GRPO (importance_sampling_level="
            "token); set importance_sampling_level (token, sequence or group) to silence this",
        )
        out["importance_sampling_level"] = "token"
    for old, new in DEPRECATED_LEARNER_KEYS.items():
        if old not in out:
            continue
        value = out.pop(old)
        _warn(old, f"use learner.{new}")
        if old == "token_aggregation" and family_meaning:  # loss_type named the family: aggregation is this
            out[new] = value
        else:
            out.setdefault(new, value)
    if isinstance(out.get("beta"), (int, float)) and out["beta"] > 0:
        warn_once(
            "beta",
            "learner.beta is TRL's KL to a frozen reference model (the learner's starting weights); "
            "before, it was the learner-sampler KL, now learner.cppo_beta",
        )
    if out.get("scale_rewards") == "auto":
        _warn(
            "scale_rewards=auto",
            "one setting now applies to every loss; 'auto' is read as 'none' (the GEPO "
            "authors' online runs); use group, batch or none",
        )
        out["scale_rewards"] = "none"
    if out.get("epsilon", 0.2) is None:  # unset used to mean 'the loss's own default'; now TRL's 0.2
        del out["epsilon"]
    return out


# learner.<old> -> trust.<new>: the trust settings have their own section
MOVED_TRUST_KEYS = {
    "learner_keys": "learner_keys",
    "accept_any_learner": "accept_any_learner",
    "verify_fraction": "verify_fraction",
    "verify_tolerance": "verify_tolerance",
}
# learner.<old> keys that are read no more, with why
DROPPED_TRUST_KEYS = {
    "verify_versions": "the learner keeps every version of the staleness window for checks now; "
    "trust.verify_keep_bytes bounds their memory"
}


def move_trust_keys(data: Any) -> Any:
    """A copy of a whole config dict with the trust keys found under `learner` moved to `trust` (warned once each;
    a value already under `trust` wins). Other inputs unchanged."""
    if not isinstance(data, dict) or not isinstance(data.get("learner"), dict):
        return data
    learner = dict(data["learner"])
    trust = dict(data.get("trust") or {}) if isinstance(data.get("trust", {}), dict) else data["trust"]
    for old, new in MOVED_TRUST_KEYS.items():
        if old in learner:
            value = learner.pop(old)
            _warn(old, f"use trust.{new}")
            if isinstance(trust, dict):
                trust.setdefault(new, value)
    for old, why in DROPPED_TRUST_KEYS.items():
        if old in learner:
            learner.pop(old)
            _warn(old, f"it is ignored: {why}")
    out = {**data, "learner": learner}
    if trust:
        out["trust"] = trust
    return out
