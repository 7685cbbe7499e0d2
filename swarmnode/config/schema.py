"""The configuration schema: one pydantic model per section and `NodeConfig`, the whole of one node's config.

Validators raise `ValueError` with one line naming the key and what is allowed; `swarmnode.config.files` turns
them into `ConfigError`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarmnode.config.addresses import is_peer_id
from swarmnode.config.advice import (
    DEFAULT_LEARNING_RATE,
    learning_rate_kind,
    warn_far_learning_rate,
    warn_lora_learning_rate,
)
from swarmnode.config.compat import map_deprecated_learner_keys, move_trust_keys, warn_once
from swarmnode.delay import parse_delay

# pure half-precision AdamW is refused below this learning rate: measured, bf16 parameters at lr 1e-6 moved ~1 %
# as far as fp32 in 100 steps (a step below half a bf16 ulp, |w| * 2^-9, rounds to nothing)
PURE_HALF_MIN_LR = 1e-4


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class NetworkConfig(_Section):
    """Where the node listens, whom it dials first, and how patient it is."""

    initial_peers: list[str] = Field(default_factory=list, description="bootstrap multiaddrs (/ip4/.../p2p/Qm...)")
    host_maddrs: list[str] = Field(default_factory=lambda: ["/ip4/0.0.0.0/tcp/0"], description="listen multiaddrs")
    announce_maddrs: list[str] = Field(default_factory=list, description="public multiaddrs to advertise (behind NAT)")
    identity_path: str | None = Field(None, description="key file; default under the user's data dir")
    startup_timeout: float = Field(60.0, gt=0, le=3600, description="seconds to start p2pd and reach a bootstrap")
    nat_port_map: bool = Field(True, description="ask the router for a port mapping (UPnP)")
    auto_nat: bool = Field(True, description="let peers tell whether this node is reachable")
    use_relay: bool = Field(True, description="reach and be reached through relays when not directly reachable")
    client_mode: bool = Field(False, description="DHT client only: reads and writes records, serves none")
    heartbeat_interval: float = Field(5.0, gt=0, le=600, description="seconds between peer-record refreshes")
    missed_beats_to_expire: int = Field(
        3, ge=1, le=100, description="heartbeats a peer record outlives its last refresh by"
    )
    dht_bucket_size: int = Field(
        8,
        ge=5,
        le=64,
        description="Kademlia's k: peers a DHT node keeps per routing "
        "bucket, lists in each lookup reply and keeps in a lookup's beam (hivemind's default is 20, BitTorrent's DHT "
        "uses 8): a lookup's calls and reply bytes stop growing with the run past about this many nodes",
    )
    peer_shards: int = Field(
        64,
        ge=1,
        le=4096,
        description="DHT keys the run's peer records are sharded over "
        "(by a prefix of the peer id's hash); every node of a run must use the same count",
    )
    peer_sample: int = Field(
        64,
        ge=1,
        le=100_000,
        description="peer records a sampler reads per look for weight "
        "holders (whole shards, in random order, until this many; the learners are read apart)",
    )
    max_message_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, le=1 << 30, description="largest frame accepted from a peer"
    )
    push_window: int = Field(
        8,
        ge=1,
        le=64,
        description="rollout groups a sampler writes to a learner back to "
        "back before reading their acks (1: one group per round trip)",
    )
    reachability: Literal["auto", "public", "private"] = Field(
        "auto",
        description="auto: at join, ask the bootstraps to dial this node back; public / private: skip the "
        "check (private: join as a DHT client and take a relay reservation)",
    )
    reachability_timeout: float = Field(8.0, gt=0, le=120, description="seconds the join's dial-back check may take")
    reachability_recheck: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="seconds between dial-back rechecks "
        "after join (0: none); a relay reservation is looked at every heartbeat",
    )
    relay_wait: float = Field(
        10.0,
        gt=0,
        le=300,
        description="seconds an unreachable node waits for a relay reservation before it joins client-only",
    )
    relay_service: bool | None = Field(
        None,
        description="relay for nodes that cannot be dialled (circuit relay "
        "v2); None: on for bootstraps, off for other nodes",
    )
    relay_max_reservations: int = Field(128, ge=1, le=100_000, description="relay: nodes holding a reservation")
    relay_max_circuits: int = Field(16, ge=1, le=10_000, description="relay: open relayed connections per peer")
    relay_data_limit_mb: float = Field(
        4096.0,
        gt=0,
        le=1e7,
        description="relay: MB relayed per connection and direction before it is reset (the peers then reconnect)",
    )
    relay_time_limit_s: float = Field(
        1800.0, gt=0, le=86400 * 7, description="relay: seconds a relayed connection lives before it is reset"
    )
    relay_conns_per_address: int = Field(
        8,
        ge=0,
        le=100_000,
        description="relay (root, iptables): open "
        "connections to a relaying bootstrap per IPv4 address or IPv6 /64 (0: no "
        "per-address limits)",
    )
    relay_conns_per_prefix: int = Field(
        32, ge=0, le=100_000, description="relay (root, iptables): open connections per IPv4 /24 or IPv6 /48 (0: none)"
    )
    relay_new_conns_per_minute: int = Field(
        6,
        ge=0,
        le=100_000,
        description="relay (root, iptables): new "
        "connections per minute per address, after a burst of "
        "relay_conns_per_address (0: no rate limit)",
    )
    relay_stranger_conns: int = Field(
        0,
        ge=0,
        le=100_000,
        description="relay (root, iptables): open "
        "connections of all addresses no established peer of the run connects from, "
        "together (0: no such cap); under relay_max_reservations, the rest stay for "
        "nodes in the run before a flood",
    )
    relay_known_after_s: float = Field(
        600.0,
        ge=0,
        le=86400 * 7,
        description="relay: seconds a key's live record "
        "must have been seen before its addresses count as known "
        "(relay_stranger_conns)",
    )


class TinyModelConfig(_Section):
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


class ModelConfig(_Section):
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


class TaskConfig(_Section):
    """Prompts and rewards. A task is a plugin (entry-point group `swarmnode.tasks`, docs/tasks.md): built in are
    `arithmetic`, `digitmap`, `word_problems`, `math` (JSONL or an HF `datasets` name), `dataset` (any local
    JSON/JSONL/Parquet/CSV file or hub dataset), `reasoning_gym` and `verifiers`."""

    name: str = Field(
        "arithmetic", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="the task: any registered task (docs/tasks.md)"
    )
    args: dict[str, Any] = Field(default_factory=dict, description="the task's own settings, checked by the task")
    reward_funcs: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="TRL-style reward functions (module:function or file.py:function; `task` = the task's own "
        "reward); empty: the task's own reward",
    )
    reward_weights: list[float] | None = Field(
        None, description="one weight per reward function (TRL's reward_weights); default all 1.0"
    )
    reward_timeout: float = Field(30.0, gt=0, le=3600, description="seconds a reward function may take per group")
    system_prompt: str | None = Field(None, description="a system message before every prompt (chat models)")
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="extra arguments of the chat template (e.g. enable_thinking: false)"
    )
    seed: int = Field(0, description="seed of the task's prompts and of prompt order")
    max_operand: int = Field(9, ge=1, le=10**6, description="arithmetic and word_problems: largest operand")
    digits: int = Field(128, ge=1, le=4096, description="digitmap: digits per prompt (= completion tokens - 1)")
    path: str | None = Field(None, description="JSONL file for the math task")
    dataset: str | None = Field(None, description="HF datasets name for the math task")
    split: str = Field("train", description="dataset split")
    prompt_field: str = Field("problem", description="math: the prompt's field")
    answer_field: str = Field("answer", description="math: the reference answer's field")
    prompt_template: str = Field(
        "{prompt}\nPut the final answer in \\boxed{{}}.\n", description="math: how a problem becomes a prompt"
    )
    eval_size: int = Field(64, ge=0, description="prompts held out for evaluation")

    @model_validator(mode="after")
    def _weights_match(self) -> TaskConfig:
        if self.reward_weights is not None and len(self.reward_weights) != max(1, len(self.reward_funcs)):
            raise ValueError(
                f"task.reward_weights has {len(self.reward_weights)} weights for "
                f"{max(1, len(self.reward_funcs))} reward functions (one each, in task.reward_funcs order)"
            )
        return self


class SamplerConfig(_Section):
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


ALGORITHM_OF_LEVEL = {"token": "grpo", "sequence": "gspo", "group": "gepo"}
LEVEL_OF_ALGORITHM = {v: k for k, v in ALGORITHM_OF_LEVEL.items()}


class LoraSettings(_Section):
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


class LearnerConfig(_Section):
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


class TrustConfig(_Section):
    """Whom a node trusts and how a learner checks samplers (`swarmnode.learner.verify`; docs/trust.md)."""

    learner_keys: list[str] = Field(default_factory=list, description="peer ids allowed to publish weights")

    @field_validator("learner_keys")
    @classmethod
    def _peer_ids(cls, value: list[str]) -> list[str]:
        bad = [key for key in value if not is_peer_id(key)]
        if bad:  # a typo here would only show as "no learner" much later
            raise ValueError(
                f"{bad[0]!r} is not a peer id (`swarmnode identity --identity-path LEARNER_KEY` prints a learner's)"
            )
        return value

    accept_any_learner: bool = Field(
        False,
        description="insecure: with no learner_keys, samplers load weights "
        "whichever key announces them (throwaway local runs only)",
    )
    verify_fraction: float = Field(
        0.05,
        ge=0,
        le=1,
        description="share of a trusted sampler's groups whose behaviour log-probs the learner "
        "recomputes (0 = no checks, claims trusted)",
    )
    verify_tolerance: float = Field(
        0.1,
        gt=0,
        le=100,
        description="t: a checked group is refused and its sampler caught when its median "
        "|claimed - recomputed| log-prob per token exceeds t, its or a completion's mean (signed or absolute) "
        "exceeds about t, or over 1 % of its tokens exceed 4t (docs/trust.md)",
    )
    verify_keep_bytes: int = Field(
        4 << 30,
        ge=0,
        description="CPU memory for the published versions kept for checks (adapters alone under "
        "LoRA); the learner accepts only claims it can check, so a smaller window narrows sync.max_staleness",
    )
    probation_checks: int = Field(
        8,
        ge=0,
        le=100_000,
        description="clean checks a new sampler key needs before its check rate starts "
        "falling from 1 towards verify_fraction (rate = probation_checks / clean checks)",
    )
    unchecked_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="most of a step's groups one sampler key may pass unchecked; its further "
        "groups wait for a later step, or are checked when the step needs them (1 = no limit)",
    )
    probation_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="most of a step's groups that may be checks of keys checked at rate 1 "
        "(on probation or caught; at least 1 per step); their further groups wait in the buffer",
    )
    seeded_groups: bool = Field(
        False,
        description="on for a run whose owner sets it (the card pins it): samplers take each group's prompt and sampling randomness from a seed of (run, key, "
        "start, counter) and learners refuse groups without one or with another prompt, replay a checked "
        "group's tokens from their own logits and distrust a key that keeps back more than gap_share of its "
        "groups (docs/trust.md)",
    )
    draw_tolerance: float = Field(
        0.02,
        gt=0,
        le=0.5,
        description="a replayed token counts as drawn when its seeded uniform lies within this much of the "
        "token's interval of the learner's CDF (engines' logits differ slightly)",
    )
    gap_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="most of a sampler key's last gap_window counters that may be missing (groups made and "
        "kept back) before the learner refuses its groups",
    )
    gap_window: int = Field(256, ge=16, le=1_000_000, description="counters of a key over which gap_share is judged")
    accept_unreplayed: bool = Field(
        False,
        description="accept seeded groups an engine could not draw replayably (vLLM): their prompts and "
        "counters are checked, their tokens only scored",
    )
    typicality_z: float = Field(
        12.0,
        ge=0,
        description="a trained group whose tokens are this many standard deviations less likely than the "
        "policy's entropy says (plus a few nats) marks its sampler caught (0: off)",
    )


class SyncConfig(_Section):
    """Echo's two protocols and the staleness bound both sides respect."""

    mode: Literal["async", "pull"] = "async"
    max_staleness: int = Field(  # 64: GEPO needed no tighter bound up to 64 steps (bench/latency_sweep.py)
        64, ge=0, le=1_000_000, description="in learner versions"
    )
    simulate_delay: str | None = Field(None, description="e.g. 'fixed:2', 'lognormal:1,0.5', 'weibull:2,1.5' (seconds)")
    delay_target: Literal["weights", "rollouts", "both"] = "weights"
    pacing: Literal["credits", "outbox"] = Field(
        "credits",
        description="credits: a learner's acks tell each sampler how many more groups it takes now "
        "(its buffer's room below learner.buffer_high_water, shared among its samplers) and samplers generate "
        "no more, so none age past max_staleness unused; outbox: samplers generate until 64 groups wait unacked",
    )

    @field_validator("simulate_delay")
    @classmethod
    def _delay_parses(cls, value: str | None) -> str | None:
        parse_delay(value)  # raises DelaySpecError (a ValueError) with the accepted forms
        return value


class SapoConfig(_Section):
    """`mode: sapo` (SAPO/HDEE): every node trains its own policy on I local + J external groups shared as text."""

    local_groups: int = Field(4, ge=0, le=4096, description="I: own groups per training step (also generated)")
    external_groups: int = Field(4, ge=0, le=4096, description="J: groups from peers per training step")
    max_groups_per_peer: int = Field(2, ge=1, le=4096, description="most groups one peer puts in one batch")
    external_weighting: Literal["on_policy", "sender_likelihood"] = Field(
        "on_policy",
        description="behaviour probability of external text: the current policy (SAPO, ratio 1) or "
        "the sender's sequence likelihood (GEPO-style)",
    )
    pool_per_peer: int = Field(16, ge=1, le=100_000, description="newest groups kept per peer until used")
    max_external_age: float = Field(120.0, gt=0, description="seconds an external group stays usable")
    external_wait: float = Field(1.0, ge=0, le=600, description="seconds a step waits for peers' groups to make up J")
    max_completion_chars: int = Field(
        4096, ge=1, le=1 << 20, description="longest completion text accepted from a peer"
    )
    max_prompt_chars: int = Field(8192, ge=1, le=1 << 20, description="longest prompt text accepted from a peer")
    plausibility_check: bool = Field(
        True,
        description="refuse a peer's group with a completion the own policy "
        "finds implausible: mean per-token log-prob below the own samples' quantile less the margin",
    )
    plausibility_quantile: float = Field(
        0.01,
        ge=0,
        lt=1,
        description="quantile of the own latest completions' mean per-token log-probs that sets the floor",
    )
    plausibility_margin: float = Field(2.0, ge=0, le=100, description="nats per token below that quantile allowed")
    plausibility_window: int = Field(512, ge=1, le=1_000_000, description="own latest completions the floor is set by")
    plausibility_min_samples: int = Field(
        16,
        ge=1,
        le=1_000_000,
        description="own completions needed to set the floor (peers' groups wait in the pool until then)",
    )
    distrust_refused_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="a peer with more than this share of its "
        "last 32 checked groups (8 at least) refused as implausible gets no place in batches for distrust_seconds",
    )
    distrust_seconds: float = Field(300.0, gt=0, le=86_400, description="how long a distrusted peer stays so")

    @model_validator(mode="after")
    def _some_groups(self) -> SapoConfig:
        if self.local_groups + self.external_groups < 1:
            raise ValueError("sapo.local_groups + sapo.external_groups must be at least 1")
        if self.plausibility_min_samples > self.plausibility_window:
            raise ValueError("sapo.plausibility_min_samples must be at most sapo.plausibility_window")
        return self


TRACKERS = ("trackio", "wandb", "tensorboard")  # TRL's `report_to` names (swarmnode.trackers)


class MetricsConfig(_Section):
    port: int | None = Field(None, ge=0, le=65535, description="Prometheus port; none = off")
    addr: str = Field("127.0.0.1", min_length=1, max_length=64, description="address /metrics listens on")
    report_to: list[Literal["trackio", "wandb", "tensorboard"]] = Field(
        default_factory=list,
        description="trackers learners and SAPO nodes report to, as TRL names them: trackio, wandb, "
        "tensorboard, a list of them, all, or none (the steps file is written either way)",
    )
    logging_dir: str | None = Field(
        None, description="where tensorboard event files and wandb's offline runs go; default <data dir>/trackers"
    )
    logging_steps: int = Field(1, ge=1, le=1_000_000, description="optimiser steps between two tracker reports")
    project: str | None = Field(
        None, max_length=128, description="the trackers' project (wandb, trackio); default the run id"
    )

    @field_validator("report_to", mode="before")
    @classmethod
    def _report_to(cls, value: Any) -> Any:
        """TRL's forms: one name or a list; "all" is every tracker, "none" (or nothing) none."""
        names = [value] if isinstance(value, str) else list(value or [])
        if "all" in names:
            return list(TRACKERS)
        return [n for n in dict.fromkeys(names) if n != "none"]


class NamesConfig(_Section):
    """The run's policy for public names (`--public-name`): shown by status, the dashboard and the run page, never
    trusted for anything (docs/run-page.md)."""

    allowed: bool = Field(True, description="whether nodes may show a public name")
    max_length: int = Field(32, ge=1, le=64, description="longest public name, in characters")
    charset: Literal["unicode", "ascii"] = Field(
        "unicode",
        description="unicode: letters and digits of any script; ascii: A-Z a-z 0-9 (both: space and .,_-'!?#+@())",
    )


class NodeConfig(_Section):
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
