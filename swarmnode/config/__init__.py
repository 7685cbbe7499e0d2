"""The node's whole configuration.

Modules:
- `schema`: `NodeConfig`, the whole of one node's config, and the section models it re-exports;
- `sections`: the pydantic models, one module per section (network, model, task, sampler, learner, trust, sync,
  sapo, metrics, names) (package);
- `files`: YAML presets and files, `--set a.b=c` overrides, and `ConfigError` (one line per user mistake);
- `compat`: old learner key names mapped to the TRL-style ones, and the trust keys moved out of `learner`, with a
  one-time warning;
- `advice`: settings that load but are probably a mistake (LoRA at a full fine-tune's learning rate), warned once;
- `addresses`: a quick shape check of `--initial-peers` (before hivemind is imported);
- `shared`: which settings a run's nodes share (its run card's) and which are each machine's own;
- `trust`: the trust root check (a sampler needs learner keys, or the insecure opt-in) before a node joins;
- `reference`: the configuration reference (docs/configuration.md), generated from the schema's descriptions.

The presets live in the clone's top-level `configs/`; a wheel carries them as `presets/` beside these modules.

Everything public is re-exported here: `from swarmnode.config import NodeConfig, load_config`.
"""

from swarmnode.config.files import (
    PRESET_DIRS,
    ConfigError,
    apply_override,
    build_config,
    known_run_ids,
    load_config,
    load_config_data,
    preset_names,
)
from swarmnode.config.schema import (
    ALGORITHM_OF_LEVEL,
    LEVEL_OF_ALGORITHM,
    PURE_HALF_MIN_LR,
    LearnerConfig,
    LoraSettings,
    MetricsConfig,
    ModelConfig,
    NetworkConfig,
    NodeConfig,
    SamplerConfig,
    SapoConfig,
    SyncConfig,
    TaskConfig,
    TinyModelConfig,
    TrustConfig,
    default_data_dir,
)

__all__ = [
    "ALGORITHM_OF_LEVEL",
    "LEVEL_OF_ALGORITHM",
    "PRESET_DIRS",
    "PURE_HALF_MIN_LR",
    "ConfigError",
    "LearnerConfig",
    "LoraSettings",
    "MetricsConfig",
    "ModelConfig",
    "NetworkConfig",
    "NodeConfig",
    "SamplerConfig",
    "SapoConfig",
    "SyncConfig",
    "TaskConfig",
    "TinyModelConfig",
    "TrustConfig",
    "apply_override",
    "build_config",
    "default_data_dir",
    "known_run_ids",
    "load_config",
    "load_config_data",
    "preset_names",
]
