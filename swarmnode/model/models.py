"""Building models and tokenizers: HF hub ids, local directories, packaged GGUF models and the built-in tiny model.

The built-in tiny model (`model.name: builtin:tiny`) is a small Qwen2-style causal LM with a character-level
tokenizer, built in code from a fixed seed and saved as an ordinary HF directory (config.json, safetensors,
tokenizer.json), so transformers and vLLM load it like any other model. Nothing is ever downloaded for it.
When `model.tiny.warm_start_steps > 0` the saved weights get a short, seeded supervised warm start on the
task's format (see `swarmnode.model.warmstart`) so RL from it shows a visible climb within minutes on a CPU.
Packaged models (`model.name: smollm2-135m-instruct` or `pkg:<module>/<file>.gguf`) are converted once from the
GGUF inside an installed pip package (see `swarmnode.model.packaged`).

Prompt format: a tokenizer keeps its chat template when `model.prompt_format` is `chat`, or `auto` and the model
has one; otherwise `load_tokenizer` removes it, so every prompt encoder (`swarmnode.model.prompting`) renders plain text.
"""

from __future__ import annotations

import hashlib
import json
import os
import string
from pathlib import Path

import torch

from swarmnode.atomic import publish_dir
from swarmnode.config import ModelConfig, TaskConfig, TinyModelConfig, default_data_dir
from swarmnode.errors import ExitCode, SwarmnodeError
from swarmnode.model.packaged import PackagedModelError, ensure_packaged_model, packaged_model
from swarmnode.model.warmstart import step_reporter, warm_start

# transformers is imported inside the functions that use it: it takes seconds to import, and `hardware`, the
# preflight checks and the demo's parent process use this module without building a model

BUILTIN_TINY = "builtin:tiny"
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]
PAD, EOS, BOS, UNK = SPECIAL_TOKENS
CHARS = string.digits + string.ascii_letters + string.punctuation + " \n"
TINY_VOCAB_SIZE = 128  # specials + CHARS = 100, padded with reserved tokens for friendlier kernels
RESERVED_TOKENS = [f"<reserved{i}>" for i in range(TINY_VOCAB_SIZE - len(SPECIAL_TOKENS) - len(CHARS))]
TINY_FORMAT = 2  # bump when the saved directory changes (2: byte-level char vocab that reloads faithfully)


class ModelLoadError(SwarmnodeError, RuntimeError):
    """The configured model cannot be found or loaded; the message names it and says why."""

    exit_code = ExitCode.MISSING


def _dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _byte_level(char: str) -> str:
    """GPT-2 byte-level alias of an ASCII character (space -> 'Ġ', newline -> 'Ċ', printable ASCII -> itself)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return bytes_to_unicode()[ord(char)]


def build_char_tokenizer():
    """A character-level tokenizer: one token per character of CHARS, plus specials.

    It is a Qwen2 byte-level BPE with no merges over byte-level character names. That is on purpose: for a
    `qwen2` model directory, transformers' AutoTokenizer (and so vLLM) rebuilds a `Qwen2Tokenizer` from the
    vocabulary whatever `tokenizer_config.json` says, and this vocabulary makes that rebuild tokenize exactly
    like this object (a plain WordLevel tokenizer lost every space and newline on reload). Characters outside
    CHARS are dropped.
    """
    from transformers import Qwen2Tokenizer

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + [_byte_level(c) for c in CHARS] + RESERVED_TOKENS)}
    return Qwen2Tokenizer(
        vocab=vocab,
        merges=[],
        unk_token=UNK,
        pad_token=PAD,
        eos_token=EOS,
        bos_token=BOS,
        additional_special_tokens=RESERVED_TOKENS,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )


def tiny_config(tiny: TinyModelConfig, tokenizer):
    """The Qwen2 config of the built-in model (head_dim 64, as the CPU vLLM kernels require)."""
    from transformers import Qwen2Config

    heads = tiny.num_attention_heads
    if tiny.hidden_size % heads or tiny.hidden_size // heads != 64:
        raise ModelLoadError(f"model.tiny: hidden_size/num_attention_heads must be 64 (got {tiny.hidden_size}/{heads})")
    return Qwen2Config(
        vocab_size=TINY_VOCAB_SIZE,
        hidden_size=tiny.hidden_size,
        intermediate_size=tiny.intermediate_size,
        num_hidden_layers=tiny.num_hidden_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=tiny.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
        use_sliding_window=False,
    )


# fields added after TINY_FORMAT 2: left out of the cache key at their default, so existing models keep their key
_LATER_FIELDS = {"warm_start_batch": 64, "digits": 128}


def _key_fields(section) -> dict:
    return {k: v for k, v in section.model_dump().items() if _LATER_FIELDS.get(k, object()) != v}


def tiny_digest(tiny: TinyModelConfig, task: TaskConfig | None) -> str:
    """sha256 of what the built-in model's weights are made from: its format, settings and seed, and the
    warm-start task's settings when it has a warm start."""
    spec = {
        "format": TINY_FORMAT,
        "tiny": _key_fields(tiny),
        "task": _key_fields(task) if task and tiny.warm_start_steps else None,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def _tiny_key(tiny: TinyModelConfig, task: TaskConfig | None) -> str:
    return tiny_digest(tiny, task)[:12]


def tiny_model_dir(tiny: TinyModelConfig, task: TaskConfig | None = None, cache_dir: Path | None = None) -> Path:
    """Where the built-in model for this shape (and warm-start task) lives in the cache."""
    return (cache_dir or default_data_dir() / "models") / f"tiny-{_tiny_key(tiny, task)}"


def ensure_tiny_model(
    tiny: TinyModelConfig, task: TaskConfig | None = None, cache_dir: Path | None = None, progress=print
) -> Path:
    """Build (once, then cached) and return the directory of the built-in tiny model."""
    from transformers import Qwen2ForCausalLM

    out = tiny_model_dir(tiny, task, cache_dir)
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    tokenizer = build_char_tokenizer()
    torch.manual_seed(tiny.seed)
    model = Qwen2ForCausalLM(tiny_config(tiny, tokenizer))
    if tiny.warm_start_steps and task is not None:
        progress(
            f"warm-starting the tiny model on the {task.name} task format ({tiny.warm_start_steps} steps, "
            "once: the result is cached)..."
        )
        warm_start(
            model,
            tokenizer,
            task,
            steps=tiny.warm_start_steps,
            seed=tiny.seed,
            correct_fraction=tiny.warm_start_correct,
            batch_size=tiny.warm_start_batch,
            on_step=step_reporter(progress, tiny.warm_start_steps),
        )
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    publish_dir(tmp, out)  # atomic: concurrent builders race, the first one wins
    return out


def resolve_model_path(model: ModelConfig, task: TaskConfig | None = None, progress=print) -> str:
    """A local directory or hub id that `from_pretrained` accepts; builds the tiny model or converts a packaged
    one if asked for it."""
    if model.name == BUILTIN_TINY:
        return str(ensure_tiny_model(model.tiny, task, progress=progress))
    try:
        packaged = packaged_model(model.name)
        if packaged is not None:
            return str(ensure_packaged_model(packaged, default_data_dir() / "models", progress=progress))
    except PackagedModelError as exc:
        raise ModelLoadError(str(exc)) from None
    path = Path(model.name).expanduser()
    if model.name.startswith((".", "/", "~")) and not path.is_dir():
        raise ModelLoadError(f"model.name {model.name!r}: no such directory")
    return str(path) if path.is_dir() else model.name


def load_tokenizer(model: ModelConfig, task: TaskConfig | None = None):
    """The tokenizer of the configured model (left padding, a pad token always set)."""
    from transformers import AutoTokenizer

    source = resolve_model_path(model, task)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            source, revision=model.revision, trust_remote_code=model.trust_remote_code
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"model {model.name!r}: cannot load tokenizer ({str(exc).splitlines()[0]})") from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.prompt_format == "plain":
        tokenizer.chat_template = None
    elif model.prompt_format == "chat" and not tokenizer.chat_template:
        raise ModelLoadError(f"model {model.name!r}: model.prompt_format=chat but its tokenizer has no chat template")
    return tokenizer


def load_model(model: ModelConfig, task: TaskConfig | None = None, device: str | torch.device = "cpu"):
    """The causal LM of the configured model on `device`, in `model.dtype`."""
    from transformers import AutoModelForCausalLM

    source = resolve_model_path(model, task)
    try:
        lm = AutoModelForCausalLM.from_pretrained(
            source, revision=model.revision, dtype=_dtype(model.dtype), trust_remote_code=model.trust_remote_code
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"model {model.name!r}: cannot load ({str(exc).splitlines()[0]})") from None
    if model.gradient_checkpointing:
        lm.gradient_checkpointing_enable()
    return lm.to(device)  # type: ignore[arg-type]  # transformers types `to` through a decorator it wraps wrongly


def meta_state_dict(model: ModelConfig) -> dict[str, torch.Tensor]:
    """The configured model's state dict as meta tensors (names, dtypes, shapes): no weights read, no memory."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(
            model_architecture(model), dtype=_dtype(model.dtype), trust_remote_code=model.trust_remote_code
        )
    return lm.state_dict()


def pick_device(spec: str = "auto") -> torch.device:
    """`auto` is the first CUDA GPU if there is one, else the CPU."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


# Architectures of the presets' models (from their published config.json), so that sizing them for the
# hardware decision needs no download. Anything else is read with AutoConfig (local dir, HF cache or hub).
KNOWN_ARCHITECTURES: dict[str, dict] = {
    "Qwen/Qwen3-0.6B": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen3-1.7B": dict(
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "Qwen/Qwen3-4B": dict(
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
}


def model_architecture(model: ModelConfig):
    """The transformers config of the configured model, without loading weights (no download for known ones)."""
    from transformers import AutoConfig

    if model.name == BUILTIN_TINY:
        return tiny_config(model.tiny, build_char_tokenizer())
    if model.name in KNOWN_ARCHITECTURES and not Path(model.name).expanduser().is_dir():
        from transformers import Qwen3Config

        return Qwen3Config(**KNOWN_ARCHITECTURES[model.name])
    try:
        return AutoConfig.from_pretrained(
            resolve_model_path(model), revision=model.revision, trust_remote_code=model.trust_remote_code
        )
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"model {model.name!r}: cannot read config ({str(exc).splitlines()[0]})") from None


def count_parameters(model: ModelConfig) -> int:
    """Parameter count from the model's config alone (no weights loaded): for the hardware decision."""
    return estimate_parameters(model_architecture(model))


def estimate_parameters(cfg) -> int:
    """Parameters of a decoder-only transformer config (embeddings, attention, MLP, norms)."""
    h, layers, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or h // heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    inter = getattr(cfg, "intermediate_size", None) or 4 * h
    attn = h * heads * head_dim + 2 * h * kv * head_dim + heads * head_dim * h
    if getattr(cfg, "model_type", "") == "qwen2" or getattr(cfg, "attention_bias", False):
        attn += heads * head_dim + 2 * kv * head_dim
    mlp = 3 * h * inter
    embed = vocab * h * (1 if getattr(cfg, "tie_word_embeddings", False) else 2)
    return embed + layers * (attn + mlp + 2 * h) + h
