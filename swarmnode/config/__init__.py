"""The node's whole configuration.

Modules:
- `schema`: the pydantic models, one per section (network, model, task, sampler, learner, sync, sapo, metrics),
  and `NodeConfig`, the whole of one node's config;
- `files`: YAML presets and files, `--set a.b=c` overrides, and `ConfigError` (one line per user mistake);
- `compat`: old learner key names mapped to the TRL-style ones with a one-time warning;
- `addresses`: a quick shape check of `--initial-peers` (before hivemind is imported);
- `reference`: the configuration reference (docs/configuration.md), generated from the schema's descriptions.

The presets ship as data beside these modules, in `presets/` (read with importlib.resources).

Everything public is re-exported here: `from swarmnode.config import NodeConfig, load_config`.
"""

from swarmnode.config.files import (
    PRESET_DIRS,
    ConfigError,
    apply_override,
    build_config,
    known_run_ids,
    load_config,
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
    default_data_dir,
)

__all__ = [
    "ALGORITHM_OF_LEVEL", "LEVEL_OF_ALGORITHM", "PRESET_DIRS", "PURE_HALF_MIN_LR", "ConfigError", "LearnerConfig",
    "LoraSettings", "MetricsConfig", "ModelConfig", "NetworkConfig", "NodeConfig", "SamplerConfig", "SapoConfig",
    "SyncConfig", "TaskConfig", "TinyModelConfig", "apply_override", "build_config", "default_data_dir",
    "known_run_ids", "load_config", "preset_names",
]
