"""The `sampler` section: generation settings (engine, batch, sampling)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from swarmnode.config.sections.base import Section


class SamplerConfig(Section):
    """Generation: engine, group size G, temperature, lengths."""

    engine: Literal["hf", "vllm"] = Field("hf", description="hf (transformers) or vllm")
    num_generations: int = Field(8, ge=2, le=256, description="G, completions per prompt")
    prompts_per_batch: int = Field(8, ge=1, le=4096, description="prompts generated per batch")
    temperature: float = Field(1.0, gt=0, le=10, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="only 1.0: the learner's log-probs use no top-p filter")
    max_completion_length: int = Field(8, ge=1, le=131072, description="new tokens per completion at most")
    max_prompt_length: int = Field(
        64, ge=1, le=131072, description="prompt tokens at most (longer prompts are cut from the left)"
    )
    max_groups_per_second: float = Field(0.0, ge=0, description="cap on generation rate (0 = none)")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="vllm: share of GPU memory it may take")
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N")

    @field_validator("top_p")
    @classmethod
    def _no_top_p_filter(cls, value: float) -> float:
        if value != 1.0:  # both engines and the learner's log-probs sample from the unfiltered distribution
            raise ValueError(
                "only 1.0 is supported: the learner computes log-probs without a top-p filter, so "
                "any other value would make the behaviour log-probs disagree with it"
            )
        return value
