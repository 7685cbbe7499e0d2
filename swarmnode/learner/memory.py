"""What one learner process needs in memory for one micro-batch of a GEPO step: pure arithmetic on the shape.

Terms (bytes), each following what the code allocates:
- weights: full training keeps master weights in fp32 (model.dtype under `precision: pure`); LoRA keeps the
  frozen base in model.dtype and the adapters in fp32;
- grads and AdamW (fp32 m, v) for the trainable parameters only (all of them, or the adapters);
- activations of the micro-batch's tokens: a decoder layer saves about 4H + 2Hq + 2KV elements in fp32 (the
  RMSNorms and the residual stream, fp32 under autocast too) and 5Hq + 4I (+2H casts under autocast) in the
  compute dtype (attention with GQA repeated k/v, SiLU-gated MLP). With activation checkpointing only each layer's
  input is kept (fp32 with fp32 master weights, model.dtype for a LoRA base), plus one layer's activations while
  it is recomputed;
- log-probs: the full-logits path holds about LOGIT_COPIES fp32 [tokens, V] tensors at its peak; the chunked path
  a few [token_chunk, vocab_chunk] fp32 tiles, the selected hidden states and their fp32 gradient, and an fp32
  [V, H] gradient accumulator when the head is trained (full training; the head is frozen under LoRA);
- AdamW's step: fp32 temporaries of about 0.65 x the trainable parameters' bytes;
- with TRL's `beta` > 0 under full training, the frozen reference model: a copy of the weights in model.dtype
  (`learner.reference`; under LoRA the reference is the base with its adapters off: no copy).
The forward/backward peak (activations, log-probs) and the optimizer step's (gradients, temporaries) are taken
as not overlapping: `total` is weights + m and v + the larger of the two.
Calibrated against peaks measured by bench/learner-memory/learner_memory.py (docs/learner-memory.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from swarmnode.config import LearnerConfig, NodeConfig, SamplerConfig
from swarmnode.learner.microbatch import rows_per_chunk

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
LOGIT_COPIES = 4  # fp32 [tokens, V] tensors at the full-logits path's peak: 4.0-4.1 measured at 1,024-2,048 tokens
OPTIMIZER_STEP_FRACTION = 0.65  # AdamW's step temporaries / the trainable parameters' fp32 bytes: 0.64 measured
#                                 (Qwen3-0.6B, first full-training step on CPU, above weights + grads + m + v)
TILE_COPIES = 4  # fp32 tiles at the chunked path's peak: two per step, ~4 measured (the next tile is allocated
#                  before the previous one is freed)


@dataclass(frozen=True)
class ModelShape:
    """The few numbers of a decoder-only architecture that memory depends on."""

    parameters: int
    hidden_size: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    num_heads: int = 0  # 0: hidden_size // head_dim
    intermediate_size: int = 0  # 0: 4 x hidden_size
    tied_embeddings: bool = True

    @classmethod
    def from_hf_config(cls, hf_cfg, parameters: int) -> ModelShape:
        heads = hf_cfg.num_attention_heads
        return cls(
            parameters=parameters,
            hidden_size=hf_cfg.hidden_size,
            num_layers=hf_cfg.num_hidden_layers,
            num_kv_heads=getattr(hf_cfg, "num_key_value_heads", None) or heads,
            head_dim=getattr(hf_cfg, "head_dim", None) or hf_cfg.hidden_size // heads,
            vocab_size=hf_cfg.vocab_size,
            num_heads=heads,
            intermediate_size=getattr(hf_cfg, "intermediate_size", None) or 4 * hf_cfg.hidden_size,
            tied_embeddings=bool(getattr(hf_cfg, "tie_word_embeddings", False)),
        )

    def projections(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder layer, by its HF module name."""
        h, heads = self.hidden_size, self.num_heads or self.hidden_size // self.head_dim
        q, kv, inter = heads * self.head_dim, self.num_kv_heads * self.head_dim, self.intermediate_size or 4 * h
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, inter),
            "up_proj": (h, inter),
            "down_proj": (inter, h),
        }


def lora_parameters(shape: ModelShape, rank: int, target_modules: list[str]) -> int:
    """Adapter parameters: r x (in + out) per adapted projection per layer."""
    return shape.num_layers * sum(
        rank * (i + o) for name, (i, o) in shape.projections().items() if name in target_modules
    )


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes of one learner micro-batch step, by term (see the module docstring)."""

    weights: int
    grads: int
    optimizer: int
    activations: int
    logprobs: int
    optimizer_step: int
    trainable_parameters: int
    micro_batch_tokens: int
    reference: int = 0

    @property
    def total(self) -> int:
        """Steady-state peak: AdamW's m and v are held throughout; the forward/backward peak (activations and the
        log-prob path) and the optimizer-step peak (gradients and AdamW's temporaries) do not overlap."""
        return (
            self.weights
            + self.reference
            + self.optimizer
            + max(self.activations + self.logprobs, self.grads + self.optimizer_step)
        )

    @property
    def first_step(self) -> int:
        """The first step's peak: m and v are allocated by its optimizer step (what a one-step bench measures)."""
        return (
            self.weights
            + self.reference
            + max(self.activations + self.logprobs, self.grads + self.optimizer + self.optimizer_step)
        )

    def to_dict(self) -> dict:
        return {**asdict(self), "total": self.total, "first_step": self.first_step}


def micro_batch_rows_and_tokens(lc: LearnerConfig, s: SamplerConfig) -> tuple[int, int]:
    """(rows, padded tokens) of the learner's largest micro-batch at the sampler's configured lengths."""
    seq = s.max_prompt_length + s.max_completion_length
    rows = rows_per_chunk(lc.prompts_per_step, s.num_generations, lc.gradient_accumulation_steps)
    if lc.max_tokens_per_microbatch:
        rows = max(1, min(rows, lc.max_tokens_per_microbatch // seq))
    return rows, rows * seq


def training_memory(
    shape: ModelShape, cfg: NodeConfig, device_type: str = "cuda", logits_path: str = "chunked"
) -> TrainingMemory:
    """Estimate one learner step's peak bytes for `cfg` on a model of this shape (`device_type` picks the
    precision `learner.precision: auto` resolves to: autocast in model.dtype on cuda, fp32 on cpu)."""
    lc, model_bytes = cfg.learner, DTYPE_BYTES[cfg.model.dtype]
    pure = lc.precision == "pure"
    autocast = not pure and model_bytes < 4 and (lc.precision == "autocast" or device_type == "cuda")
    master = model_bytes if pure else 4
    compute = model_bytes if (autocast or pure) else 4
    if lc.lora.enabled:
        trainable = lora_parameters(shape, lc.lora.r, lc.lora.target_modules)
        weights = shape.parameters * model_bytes + trainable * 4
        grad_bytes = 4
    else:
        trainable, weights, grad_bytes = shape.parameters, shape.parameters * master, master
    h, heads = shape.hidden_size, shape.num_heads or shape.hidden_size // shape.head_dim
    hq, kv = heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    inter = shape.intermediate_size or 4 * h
    layer_fp32 = 4 * h + 2 * hq + 2 * kv
    layer_compute = 5 * hq + 4 * inter + (2 * h if autocast else 0)
    rows, tokens = micro_batch_rows_and_tokens(lc, cfg.sampler)
    per_layer = tokens * (layer_fp32 * 4 + layer_compute * compute)
    # the residual stream (each checkpointed layer's input) is fp32 when fp32 master weights are trained, and in
    # the compute dtype when the base is frozen in model.dtype (LoRA) or everything is (pure)
    stream = compute if (lc.lora.enabled or pure) else 4
    if cfg.model.gradient_checkpointing:
        activations = tokens * h * stream * shape.num_layers + per_layer
    else:
        activations = per_layer * shape.num_layers
    completion_tokens = rows * cfg.sampler.max_completion_length
    v = shape.vocab_size
    from swarmnode.model.logprobs import TOKEN_CHUNK, VOCAB_CHUNK  # imports torch: only when estimating training

    if logits_path == "full":
        logprobs = completion_tokens * v * 4 * LOGIT_COPIES
    else:
        head_trained = not lc.lora.enabled
        tile = min(completion_tokens, TOKEN_CHUNK) * min(v, VOCAB_CHUNK) * 4 * TILE_COPIES
        logprobs = tile + completion_tokens * h * (compute + 4) + (v * h * 4 if head_trained else 0)
    return TrainingMemory(
        weights=weights,
        grads=trainable * grad_bytes,
        optimizer=trainable * 8,
        activations=activations,
        logprobs=logprobs,
        optimizer_step=int(trainable * 4 * OPTIMIZER_STEP_FRACTION),
        trainable_parameters=trainable,
        micro_batch_tokens=tokens,
        reference=shape.parameters * model_bytes if lc.beta > 0 and not lc.lora.enabled else 0,
    )
