"""The `learner` section (the loss, the optimiser, LoRA in `learner.lora`) and the algorithm names
(gepo, gspo, grpo) of its importance-sampling levels."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from swarmnode.config.advice import warn_lora_learning_rate
from swarmnode.config.compat import map_deprecated_learner_keys, warn_once
from swarmnode.config.sections.base import Section

ALGORITHM_OF_LEVEL = {"token": "grpo", "sequence": "gspo", "group": "gepo"}
LEVEL_OF_ALGORITHM = {v: k for k, v in ALGORITHM_OF_LEVEL.items()}


class LoraSettings(Section):
    """LoRA through peft: the learner trains low-rank adapters only; published versions carry only them."""

    enabled: bool = Field(False, description="train LoRA adapters instead of all weights")
    r: int = Field(16, ge=1, le=1024, description="adapter rank")
    alpha: float = Field(32.0, gt=0, le=100_000, description="lora_alpha (the update is scaled by alpha / r)")
    dropout: float = Field(0.0, ge=0, lt=1, description="lora_dropout")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        min_length=1,
        description="module names to adapt (the attention and MLP projections of Qwen/Llama)",
    )


class LearnerConfig(Section):
    """GEPO/GSPO/GRPO and the optimiser. Names shared with TRL's GRPOConfig mean what they mean there
    (`beta`, `epsilon`, `epsilon_high`, `importance_sampling_level`, `loss_type`, `scale_rewards`); GEPO's own
    options start with `gepo_`; HeteroRL's learner-sampler KL is `cppo_beta`. Old names (see
    `DEPRECATED_LEARNER_KEYS`) are mapped with a one-time warning."""

    importance_sampling_level: Literal["token", "sequence", "group"] = Field(
        "group", description="token = GRPO, sequence = GSPO (as in TRL), group = GEPO's group expectation"
    )
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = Field(
        "grpo",
        description="token aggregation as in TRL: grpo = token mean per sequence then mean; bnpo/dapo = "
        "mean over all tokens; dr_grpo = sum / (rows * sampler.max_completion_length)",
    )
    epsilon: float = Field(0.2, gt=0, le=10, description="PPO clip, low side (GSPO's paper: 3e-4)")
    epsilon_high: float | None = Field(
        None, gt=0, le=10, description="PPO clip, high side; unset = epsilon (GSPO's paper: 4e-4)"
    )
    beta: float = Field(
        0.0,
        ge=0,
        le=100,
        description="as TRL: KL penalty to a frozen reference model (the "
        "learner's starting weights; a full copy of the model in memory unless LoRA), k3 per token "
        "aggregated like the loss; 0 = off. The learner-sampler KL is cppo_beta",
    )
    # cppo_beta 0 and gepo_defensive_lambda 0 were chosen by the latency sweep (bench/latency-tolerance/README.md)
    cppo_beta: float = Field(
        0.0,
        ge=0,
        le=100,
        description="HeteroRL's learner-sampler KL penalty (k3 per token, "
        "aggregated like the loss by loss_type; zero on-policy; 0 = off)",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "none",
        description="as TRL: divide advantages by the group's std (group, or true), by the std of every "
        "reward of the step (batch), or not (none, or false; the GEPO authors' online runs); one setting for "
        "every importance_sampling_level",
    )
    gepo_defensive_lambda: float = Field(0.0, ge=0, le=1, description="GEPO defensive sampling blend (0 = off)")
    gepo_defensive_schedule: Literal["fixed", "staleness"] = Field(
        "fixed", description="fixed: lambda as set; staleness: 1 - (1 - lambda)^staleness per row"
    )
    gepo_group_scope: Literal["prompt", "microbatch"] = Field(
        "prompt",
        description="E_q[q] over one prompt's completions (the paper) or shuffled sets of "
        "gepo_microbatch_rows rows from mixed prompts (the authors' released code)",
    )
    gepo_microbatch_rows: int = Field(
        8,
        ge=2,
        le=65536,
        description="rows per E_q[q] set with gepo_group_scope=microbatch (the authors' micro-batch: 8)",
    )
    delta: float | None = Field(
        None,
        gt=1,
        le=1000,
        description="as TRL (INTELLECT-2's two-sided clip): cap on the importance weight in the unclipped branch, "
        "bounding w*A for negative advantages; unset = off (TRL: > 1 + epsilon when set, e.g. 4)",
    )
    vllm_importance_sampling_correction: bool = Field(
        False,
        description="TRL's sampler-mismatch correction against the behaviour log-probs (the sampler engine's "
        "numerics and staleness together): mask or truncate by vllm_importance_sampling_mode; off by default "
        "(TRL: on)",
    )
    vllm_importance_sampling_mode: Literal["sequence_mask", "sequence_truncate", "token_mask", "token_truncate"] = (
        Field(
            "sequence_mask",
            description="as TRL: sequence_* use exp(sum over the completion of lp - lq), token_* each token's; "
            "*_mask zeroes the loss outside [clip_min, clip_max], *_truncate caps the effective weight there",
        )
    )
    vllm_importance_sampling_clip_max: float | None = Field(
        3.0, gt=0, le=1e6, description="as TRL: the upper bound C_max of the importance-sampling correction"
    )
    vllm_importance_sampling_clip_min: float | None = Field(
        None, ge=0, le=1e6, description="as TRL: the lower bound C_min (unset: none for *_mask, 0 for *_truncate)"
    )
    off_policy_mask_threshold: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="as TRL (DeepSeek-V3.2's off-policy sequence mask): drop a sequence with negative advantage "
        "whose mean lq - lp per token exceeds this; unset = off (TRL suggests 0.5)",
    )
    gepo_plus: bool = Field(
        False,
        description="the GEPO authors' gepo+: a sequence whose learner-sampler KL is below gepo_plus_kl_threshold "
        "takes GSPO's denominator q_i instead of E_q[q] (on-policy: GSPO; stale: GEPO)",
    )
    gepo_plus_kl_threshold: float = Field(
        0.002, ge=0, le=100, description="gepo+'s per-sequence KL threshold (the authors': 0.002)"
    )
    mask_truncated_completions: bool = Field(
        False,
        description="as TRL (DAPO): completions cut at sampler.max_completion_length without an end token count "
        "in no loss term (their rows stay in the normaliser)",
    )
    use_bias_correction_kl: bool = Field(
        False,
        description="as TRL (DeepSeek-V3.2): multiply beta's per-token reference KL by the importance weight "
        "(an unbiased estimate on samples from the sampler)",
    )
    loss_normaliser: Literal["trained", "drawn"] = Field(
        "trained",
        description="trained: a step's loss is a mean over the rows it trains (zero-signal groups skipped, the "
        "step scaled by 1/(1 - zero share)); drawn: over every row drawn, as TRL and the GEPO authors",
    )
    dynamic_sampling: bool = Field(
        False,
        description="DAPO's dynamic sampling: a step drawing zero-signal groups draws more from the buffer until "
        "prompts_per_step groups carry signal or the buffer is spent",
    )
    learning_rate: float = Field(
        1e-6,
        gt=0,
        le=1,
        description="AdamW learning rate; unset: 1e-6 for full "
        "fine-tuning (TRL's default), 1e-5 under LoRA, 1e-3 for builtin:tiny (see "
        "config.advice); warned far outside the usual range",
    )
    weight_decay: float = Field(0.0, ge=0, le=1, description="AdamW weight decay")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient clipping norm")
    gradient_accumulation_steps: int = Field(
        1,
        ge=1,
        le=1024,
        description="a step's rows go through in chunks of ceil(prompts_per_step x num_generations / this) "
        "rows (one backward each, as TRL's per-device batch)",
    )
    max_tokens_per_microbatch: int = Field(
        0,
        ge=0,
        le=10_000_000,
        description="split rows into forward/backward passes of at most this many padded "
        "tokens (prompt + completion); group statistics are computed first, so the gradient is unchanged (0 = off)",
    )
    precision: Literal["auto", "fp32", "autocast", "pure"] = Field(
        "auto",
        description="auto: fp32 master weights, autocast in model.dtype on GPU (fp32 on CPU); autocast: "
        "the same on any device; fp32: no autocast; pure: parameters and AdamW in model.dtype",
    )
    lr_schedule: Literal["constant_with_warmup", "cosine", "constant"] = Field(
        "constant_with_warmup", description="learning-rate schedule (transformers' schedulers)"
    )
    warmup_steps: int = Field(0, ge=0, le=10_000_000, description="linear learning-rate warmup, in optimiser steps")
    total_steps: int = Field(10_000, ge=1, le=1_000_000_000, description="cosine: steps to decay to 0 over")
    lora: LoraSettings = Field(default_factory=LoraSettings)
    prompts_per_step: int = Field(8, ge=1, le=4096, description="groups per optimiser step")
    publish_every: int = Field(1, ge=1, le=100_000, description="optimiser steps per published weight version")
    publish_dtype: Literal["model", "float32", "bfloat16", "float16"] = Field(
        "model",
        description="dtype of the floating tensors of published versions (model = model.dtype); bfloat16 halves "
        "a float32 model's fetches while the learner keeps fp32 master weights; samplers load them into model.dtype",
    )
    checkpoint_every: int = Field(50, ge=1, description="optimiser steps between checkpoints")
    keep_versions: int = Field(4, ge=1, le=1000, description="complete weight versions kept on disk")
    save_every: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="every this many versions write the newest as a Hugging Face model directory (a PEFT adapter "
        "under LoRA) in save_dir, as `swarmnode export` does; 0 = off",
    )
    save_total_limit: int = Field(
        2, ge=1, le=1000, description="as TRL: saved directories kept (the last K); older ones are removed"
    )
    save_dir: str = Field("", max_length=4096, description="where saved directories go; empty: <data dir>/exports")
    push_to_hub: bool = Field(
        False, description="as TRL: upload each saved directory to hub_model_id (the version in the commit message)"
    )
    hub_model_id: str = Field("", max_length=200, description="as TRL: the Hub repo saved directories are pushed to")
    buffer_size: int = Field(512, ge=1, le=10_000_000, description="max groups held")
    per_sampler_quota: float = Field(0.5, gt=0, le=1, description="max share of the buffer one sampler may hold")
    max_groups_per_second_per_sampler: float = Field(
        200.0,
        gt=0,
        le=100_000,
        description="rollout groups one peer may push per second (a burst of twice as "
        "many); beyond it the learner answers rate_limited and the sender backs off",
    )
    buffer_high_water: int = Field(
        0,
        ge=0,
        le=10_000_000,
        description='groups held above which the learner answers pushes "full" without '
        "decoding them (the sampler resends shortly); with sync.pacing credits also the number of groups it "
        "invites its samplers to keep it at; 0: prompts_per_step with credits, else 4 x prompts_per_step",
    )
    draw_order: Literal["newest", "oldest"] = Field("newest", description="which buffered groups a step takes first")
    sample_when_idle: bool = Field(
        False,
        description="with too few groups buffered for a step, generate a batch with the weights being "
        "trained (on-policy) instead of waiting for the samplers: a learner whose samplers cannot keep up is "
        "never idle (these groups are not journaled: a crash loses them)",
    )
    max_learners: int = Field(
        1,
        ge=1,
        le=1000,
        description="learners the run wants; above 1 they train one "
        "policy together, averaging their parameters through hivemind (see average_every)",
    )
    average_every: int = Field(
        8,
        ge=1,
        le=1_000_000,
        description="with several learners: local optimiser steps "
        "between two rounds of parameter averaging (DiLoCo's H)",
    )
    averaging_timeout: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="seconds an averaging round may take (finding "
        "the group included) before it fails and the learner trains on alone",
    )
    averaging_outer_lr: float = Field(
        1.0,
        gt=0,
        le=8,
        description="with several learners: a round's result is "
        "anchor + this * (mean - anchor), the anchor being the last round's weights "
        "(DiLoCo's outer step as SGD); 1 is the plain mean, N (the learners) adds "
        "up their local updates",
    )
    device: str = Field("auto", description="auto, cpu, cuda or cuda:N")
    eval_every: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="score the task's held-out split every this many versions (and at the start), on a copy of "
        "the model in a thread of its own (training goes on meanwhile); 0 = off",
    )
    eval_samples: int = Field(4, ge=1, le=64, description="completions per held-out prompt (the k of pass@k)")

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        return map_deprecated_learner_keys(data)

    @model_validator(mode="after")
    def _push_target(self) -> LearnerConfig:
        if self.push_to_hub and not (self.hub_model_id and self.save_every):
            raise ValueError("learner.push_to_hub needs learner.hub_model_id (owner/name) and learner.save_every > 0")
        return self

    @model_validator(mode="after")
    def _lora_learning_rate(self) -> LearnerConfig:
        if "learning_rate" in self.model_fields_set:  # unset: NodeConfig picks one by the model
            warn_lora_learning_rate(self.lora.enabled, self.learning_rate)
        return self

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _scale_rewards_bool(cls, value: Any) -> Any:
        return {True: "group", False: "none"}.get(value, value) if isinstance(value, bool) else value

    @model_validator(mode="after")
    def _length_weighting(self) -> LearnerConfig:
        if self.importance_sampling_level != "token" and self.loss_type != "grpo":
            warn_once(
                f"length-weighting:{self.importance_sampling_level}:{self.loss_type}",
                f"learner.loss_type={self.loss_type} weights each sequence-level importance weight "
                f"(importance_sampling_level={self.importance_sampling_level}) by its completion's length; "
                "the GSPO and GEPO papers take the plain mean over sequences (loss_type=grpo)",
            )
        return self

    @property
    def algorithm(self) -> str:
        """The loss family the importance-sampling level selects: grpo, gspo or gepo."""
        return ALGORITHM_OF_LEVEL[self.importance_sampling_level]
