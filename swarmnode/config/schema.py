"""The configuration schema: `NodeConfig`, the whole of one node's config, over one pydantic model per section
(`swarmnode.config.sections`, re-exported here: `from swarmnode.config.schema import LearnerConfig`).

Validators raise `ValueError` with one line naming the key and what is allowed; `swarmnode.config.files` turns
them into `ConfigError`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from swarmnode.config.advice import DEFAULT_LEARNING_RATE, learning_rate_kind, warn_far_learning_rate
from swarmnode.config.compat import move_trust_keys
from swarmnode.config.sections.base import Section
from swarmnode.config.sections.learner import ALGORITHM_OF_LEVEL, LEVEL_OF_ALGORITHM, LearnerConfig, LoraSettings
from swarmnode.config.sections.metrics import TRACKERS, MetricsConfig
from swarmnode.config.sections.model import ModelConfig, TinyModelConfig
from swarmnode.config.sections.names import NamesConfig
from swarmnode.config.sections.network import NetworkConfig
from swarmnode.config.sections.sampler import SamplerConfig
from swarmnode.config.sections.sapo import SapoConfig
from swarmnode.config.sections.sync import SyncConfig
from swarmnode.config.sections.task import TaskConfig
from swarmnode.config.sections.trust import TrustConfig

__all__ = [
    "ALGORITHM_OF_LEVEL",
    "LEVEL_OF_ALGORITHM",
    "PURE_HALF_MIN_LR",
    "TRACKERS",
    "LearnerConfig",
    "LoraSettings",
    "MetricsConfig",
    "ModelConfig",
    "NamesConfig",
    "NetworkConfig",
    "NodeConfig",
    "SamplerConfig",
    "SapoConfig",
    "Section",
    "SyncConfig",
    "TaskConfig",
    "TinyModelConfig",
    "TrustConfig",
    "default_data_dir",
]

# pure half-precision AdamW is refused below this learning rate: measured, bf16 parameters at lr 1e-6 moved ~1 %
# as far as fp32 in 100 steps (a step below half a bf16 ulp, |w| * 2^-9, rounds to nothing)
PURE_HALF_MIN_LR = 1e-4


class NodeConfig(Section):
    """One node of one run."""

    run_id: str = Field(
        "swarmnode-demo",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="the run's name: nodes of one run share it (letters, digits, . _ -)",
    )
    role: Literal["auto", "sampler", "learner"] = Field(
        "auto", description="auto: decided from the hardware and the run's live learners; sampler or learner: forced"
    )
    mode: Literal["one_policy", "sapo"] = Field(
        "one_policy",
        description="one_policy: learners train one policy, samplers follow it; sapo: every node "
        "samples and trains its own policy and shares rollouts as text (section `sapo`)",
    )
    data_dir: str | None = Field(None, description="checkpoints, weight store, cache; default user data dir")
    public_name: str | None = Field(
        None, description="a name shown beside this node's key (status, dashboard, run page); see `names`"
    )
    names: NamesConfig = Field(default_factory=NamesConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    sampler: SamplerConfig = Field(default_factory=SamplerConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    sync: SyncConfig = Field(default_factory=SyncConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    sapo: SapoConfig = Field(default_factory=SapoConfig)
    trust: TrustConfig = Field(default_factory=TrustConfig)

    @model_validator(mode="before")
    @classmethod
    def _trust_keys_moved(cls, data: Any) -> Any:
        return move_trust_keys(data)

    @model_validator(mode="after")
    def _consistent(self) -> NodeConfig:
        if self.task.name == "math" and not (self.task.path or self.task.dataset):
            raise ValueError("task.name=math needs task.path (JSONL) or task.dataset (HF datasets name)")
        lc = self.learner
        kind = learning_rate_kind(self.model.name, lc.lora.enabled)
        if "learning_rate" in lc.model_fields_set:
            warn_far_learning_rate(kind, lc.learning_rate)
        else:  # the default that suits the model (config.advice); still "unset" for a copy with other settings
            object.__setattr__(lc, "learning_rate", DEFAULT_LEARNING_RATE[kind])
        if self.sapo.external_weighting == "sender_likelihood" and lc.importance_sampling_level == "token":
            raise ValueError(
                "sapo.external_weighting=sender_likelihood gives one behaviour likelihood per sequence "
                "(spread evenly over its tokens): token-level weights (importance_sampling_level="
                "token) would be meaningless; use sequence or group, or external_weighting=on_policy"
            )
        if lc.precision == "pure" and self.model.dtype != "float32" and lc.learning_rate < PURE_HALF_MIN_LR:
            raise ValueError(
                f"learner.precision=pure with model.dtype={self.model.dtype} and learning_rate={lc.learning_rate:g} "
                f"would barely learn (AdamW updates below ~1/256 of a weight are rounded away in {self.model.dtype}); "
                "use learner.precision=auto (fp32 master weights + autocast) or a learning_rate >= "
                f"{PURE_HALF_MIN_LR:g}"
            )
        return self

    def resolved_data_dir(self) -> Path:
        """The node's data directory (created on demand by whoever writes there)."""
        if self.data_dir:
            return Path(self.data_dir).expanduser()
        return default_data_dir() / self.run_id


def default_data_dir() -> Path:
    """`$SWARMNODE_HOME` or `~/.local/share/swarmnode`."""
    base = os.environ.get("SWARMNODE_HOME") or os.path.join(
        os.environ.get("XDG_DATA_HOME", os.path.expanduser("~/.local/share")), "swarmnode"
    )
    return Path(base)
