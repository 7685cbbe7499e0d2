"""Which settings a run's nodes must share (the run card's) and which are each machine's own.

Shared: the model, the task, G and the lengths, the temperature, the algorithm and its loss and optimiser settings,
sync and staleness bounds, the trust settings (with the designated learner keys), SAPO's settings, and the
heartbeat that liveness is judged by. Machine-local: the role, the engine, devices, batch and micro-batch sizes,
memory limits, ports and addresses, data directories, metrics. A key is shared when a prefix of it is listed in
`SHARED` and none in `LOCAL` (the longest match wins).

A node joining by invite takes the shared settings from the card; its own `--config`/`--set` may set local keys
only, and one that sets a shared key to another value is refused (`conflicts`). Of the local settings, those in
`CARRIED_DEFAULTS` travel in the card as the host's defaults: a joiner takes them unless it sets its own (a
loopback run's listen address, UPnP off).
"""

from __future__ import annotations

from typing import Any

from swarmnode.config.schema import NodeConfig

SHARED = (
    "mode",
    "model",
    "task",
    "sampler.num_generations",
    "sampler.temperature",
    "sampler.top_p",
    "sampler.max_completion_length",
    "sampler.max_prompt_length",
    "learner",
    "sync",
    "trust",
    "sapo",
    "network.heartbeat_interval",
    "network.missed_beats_to_expire",
    "names",
)
LOCAL = (
    "model.gradient_checkpointing",
    "task.path",
    "learner.device",
    "learner.gradient_accumulation_steps",
    "learner.max_tokens_per_microbatch",
    "learner.precision",
    "learner.checkpoint_every",
    "learner.keep_versions",
    "learner.save_every",
    "learner.save_total_limit",
    "learner.save_dir",
    "learner.push_to_hub",
    "learner.hub_model_id",
    "learner.buffer_size",
    "learner.per_sampler_quota",
    "learner.buffer_high_water",
    "learner.max_groups_per_second_per_sampler",
    "learner.sample_when_idle",
    "learner.draw_order",
    "sync.simulate_delay",
    "sync.delay_target",
    "trust.accept_any_learner",
    "trust.verify_keep_bytes",
)
# local settings the host's card suggests to joiners (they may set their own)
CARRIED_DEFAULTS = (
    "network.host_maddrs",
    "network.nat_port_map",
    "network.auto_nat",
    "network.use_relay",
    "network.startup_timeout",
    "network.reachability",
    "sampler.device",
    "learner.device",
    "sampler.max_groups_per_second",
    "sampler.prompts_per_batch",
    "learner.buffer_size",
    "learner.max_groups_per_second_per_sampler",
)
# shared settings a running node takes from a card update without a restart (any other change makes it leave)
FOLLOWABLE = (
    "trust.learner_keys",
    "sync.max_staleness",
    "trust.verify_fraction",
    "trust.verify_tolerance",
    "trust.probation_checks",
)


def _matches(key: str, prefixes: tuple[str, ...]) -> int:
    """Length of the longest prefix in `prefixes` that `key` equals or sits under (0: none)."""
    return max((len(p) for p in prefixes if key == p or key.startswith(p + ".")), default=0)


def is_shared(key: str) -> bool:
    """Whether the dotted config key `key` is one a run's nodes must share."""
    return _matches(key, SHARED) > _matches(key, LOCAL)


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}` (lists and scalars are leaves)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `flatten`."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def _plain(cfg: NodeConfig) -> dict[str, Any]:
    return flatten(cfg.model_dump(mode="json"))


def shared_settings(cfg: NodeConfig) -> dict[str, Any]:
    """The shared settings of `cfg`, nested (what a run card carries)."""
    return nest({k: v for k, v in _plain(cfg).items() if is_shared(k)})


def carried_defaults(cfg: NodeConfig) -> dict[str, Any]:
    """The host's local settings a card suggests to joiners, nested."""
    return nest({k: v for k, v in _plain(cfg).items() if _matches(k, CARRIED_DEFAULTS)})


def conflicts(user: NodeConfig, explicit: dict[str, Any], card_settings: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, the user's value, the run's value) for each shared key the user set (`explicit`: the raw, nested
    data of their --config and --set) to a value other than the card's."""
    mine, run = _plain(user), flatten(card_settings)
    found = []
    for key in sorted(flatten(explicit)):
        for full in [k for k in mine if k == key or k.startswith(key + ".")]:
            if is_shared(full) and full in run and mine[full] != run[full]:
                found.append((full, mine[full], run[full]))
    return found


def local_part(explicit: dict[str, Any]) -> dict[str, Any]:
    """The machine-local keys of raw config data (nested)."""
    return nest({k: v for k, v in flatten(explicit).items() if not is_shared(k)})


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, old value, new value) of each setting that differs between two nested settings dicts."""
    a, b = flatten(old), flatten(new)
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def followable(changes: list[tuple[str, Any, Any]]) -> bool:
    """Whether a running node can take `changes` (from `diff`) without a restart."""
    return all(_matches(key, FOLLOWABLE) for key, _, _ in changes)


def describe(changes: list[tuple[str, Any, Any]], old: str = "", new: str = " -> ") -> str:
    """`key a -> b; key2 c -> d` (or with other words between the two values)."""
    return "; ".join(f"{key} {old}{a!r}{new}{b!r}" if old else f"{key} {a!r}{new}{b!r}" for key, a, b in changes)
