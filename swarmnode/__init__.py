"""swarmnode: a peer-to-peer node for decentralized RL post-training of LLMs (GEPO over hivemind/libp2p).

The package map, by concern (docs/architecture.md draws the layers; `lint-imports` keeps them):

The command line
- `cli`, `__main__`     the typer app and its command groups, one thin function per command (package);
                        `python -m swarmnode`
- `cli_runtime`         logging to stderr, running until Ctrl-C or SIGTERM
- `errors`              `SwarmnodeError` and the exit codes

The commands
- `node`                a node in a swarm: join, bootstrap, idle, preflight, hardware, the roles, SAPO (package)
- `local`               on one machine: the demo, a local swarm of processes, single-process RL (package)
- `export`              the model out: HF model / PEFT adapter directories, model cards, the Hub, eval (package)
- `observe`             watching a swarm: health records, status, the dashboard, metrics (package)
- `web`                 the run page in a browser: `dashboard --web` (package)
- `trackers`            a node's figures to trackio, wandb and tensorboard, with TRL's metric names (package)

The parts underneath
- `swarm`               the network: p2pd, the DHT, rollout push, weight versions, averaging (package)
- `sampler`, `learner`  the network-free sampler and learner cores (packages)
- `model`               building models, prompts, log-probs, adapter versions, host-device transfers (package)
- `protocol`            every record that crosses the network (package)
- `board`               the contributors board: a learner's tally and curves, their signed records (package)
- `tasks`, `config`     prompts and rewards (task plugins, TRL reward functions); the configuration and its presets
- `identity`            the node's Ed25519 key: peer id and signatures
- `compute_thread`      the one thread a role runs its model work on
- `allocator`           keep freed heap memory in the process (fewer page faults while generating)
- `delivery`, `staleness`, `backoff`   the rollout sink interface; staleness buckets; backoff with jitter
- `delay`               simulated weight and rollout delays for latency experiments
- `diskspace`           a full disk as a one-line notice: free space checks before big writes
- `quiet_log`           one logger held to errors for a while (per-attempt warnings under a one-line failure)
- `atomic`              atomic writes: a temporary file (or directory) renamed over the target

The public names below are importable from `swarmnode` itself (`from swarmnode import LearnerLoop`); each is
imported on first use, so `import swarmnode` stays light (the CLI answers before torch is loaded).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any


def _installed_version() -> str:
    """The installed swarmnode distribution's version; `0+unknown` when none is installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version("swarmnode")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


try:  # written at build (wheel or editable install) by setuptools-scm from the git tags: pyproject.toml
    from swarmnode._version import __version__
except ImportError:  # a source tree never built (on PYTHONPATH): the installed distribution's, else unknown
    __version__ = _installed_version()

# public name -> the module that defines it
_EXPORTS = {
    "NodeConfig": "swarmnode.config",
    "load_config": "swarmnode.config",
    "ConfigError": "swarmnode.config",
    "SwarmnodeError": "swarmnode.errors",
    "ExitCode": "swarmnode.errors",
    "Identity": "swarmnode.identity",
    "RolloutGroup": "swarmnode.protocol.rollout",
    "RolloutLimits": "swarmnode.protocol.rollout",
    "PeerRecord": "swarmnode.protocol.peer",
    "Task": "swarmnode.tasks",
    "build_task": "swarmnode.tasks",
    "SamplerLoop": "swarmnode.sampler.loop",
    "LearnerLoop": "swarmnode.learner.loop",
    "RolloutSender": "swarmnode.swarm.rollout_push",
    "RolloutReceiver": "swarmnode.swarm.rollout_push",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    from swarmnode.config import ConfigError, NodeConfig, load_config
    from swarmnode.errors import ExitCode, SwarmnodeError
    from swarmnode.identity import Identity
    from swarmnode.learner.loop import LearnerLoop
    from swarmnode.protocol.peer import PeerRecord
    from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits
    from swarmnode.sampler.loop import SamplerLoop
    from swarmnode.swarm.rollout_push import RolloutReceiver, RolloutSender
    from swarmnode.tasks import Task, build_task


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'swarmnode' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
