"""The `model` section: which model, its dtype and template, and the tiny model's shape (`model.tiny`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from swarmnode.config.sections.base import Section


class TinyModelConfig(Section):
    """Shape of the built-in tiny Qwen2-style model (character tokenizer, built in code, no download)."""

    hidden_size: int = Field(128, ge=64, le=4096, description="hidden width")
    num_hidden_layers: int = Field(2, ge=1, le=64, description="transformer layers")
    num_attention_heads: int = Field(2, ge=1, le=64, description="attention heads")
    intermediate_size: int = Field(256, ge=16, description="MLP width")
    max_position_embeddings: int = Field(128, ge=16, description="context length in tokens (characters)")
    seed: int = Field(0, description="seed of the initial weights")
    warm_start_steps: int = Field(300, ge=0, le=100_000, description="supervised steps on the task format")
    warm_start_correct: float = Field(
        0.5, ge=0, le=1, description="share of warm-start answers that are right (the rest are another prompt's)"
    )
    warm_start_batch: int = Field(64, ge=1, le=4096, description="prompts per warm-start step")


class ModelConfig(Section):
    """Which policy the run trains: `builtin:tiny`, an HF hub id, a local directory, or a packaged GGUF model
    (`smollm2-135m-instruct`, `pkg:<module>/<file>.gguf`)."""

    name: str = Field(
        "builtin:tiny",
        description="builtin:tiny, an HF hub id, a local directory, smollm2-135m-instruct or pkg:<module>/<file>.gguf",
    )
    prompt_format: Literal["auto", "chat", "plain"] = Field(
        "auto", description="chat: prompts go through the tokenizer's chat template; auto: when it has one"
    )
    revision: str | None = Field(None, description="HF hub revision")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="weights' dtype (published versions keep it unless learner.publish_dtype)"
    )
    trust_remote_code: bool = Field(False, description="let transformers run the model repository's code")
    gradient_checkpointing: bool = Field(False, description="activation checkpointing in the learner")
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
