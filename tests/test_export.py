"""`swarmnode export` from a learner's data directory, in process: the model directory `from_pretrained` loads gives
the learner's next-token log-probs of that version; a LoRA version's adapter loads with peft and its merged form
equals the adapter applied; every failure (a version not held, one signed by a key not the run's, a corrupt chunk,
a full disk) is one line with its exit code and leaves no directory that loads; `learner.save_every` keeps the last
K directories, and a push to an unreachable Hub is one line while saving goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swarmnode.config import load_config
from swarmnode.errors import ExitCode
from swarmnode.export.card import read_facts
from swarmnode.export.command import run_export
from swarmnode.export.run_info import write_run_info
from swarmnode.export.saver import VersionSaver, saved_versions
from swarmnode.export.staging import staged_dir
from swarmnode.identity import Identity
from swarmnode.learner.lora import adapter_spec, adapter_state, apply_lora
from swarmnode.model.adapters import weights_hash
from swarmnode.model.models import load_model
from swarmnode.swarm.weights import WeightStore

RUN = "export-test"
LORA = ["learner.lora.enabled=true", "learner.lora.r=4", "learner.lora.alpha=8"]
PROMPT = torch.tensor([[7, 8, 9, 10, 11, 12, 13]])


def run_config(learner: Identity, sets: list[str] = ()):
    return load_config("tiny-cpu", [f"run_id={RUN}", f"trust.learner_keys=[{learner.peer_id}]", *sets])


def logprobs(model) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(PROMPT).logits.float(), dim=-1)


def nudged(model, seed: int = 1):
    """The model with every trainable weight moved a little (a trained version's stand-in)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


def data_dir(root: Path, cfg, learner: Identity, state, version: int = 3, adapter=None) -> Path:
    """A learner's data directory holding `state` as `version`, signed by `learner`."""
    d = root / "learner"
    store = WeightStore(d / "weights", RUN)
    store.publish(version, {k: v.detach().clone() for k, v in state.items()}, learner, adapter=adapter)
    write_run_info(d, cfg)
    return d


def loads(path: Path) -> bool:
    """Whether a directory there loads as a model or an adapter (what a half-written one must not)."""
    return (path / "config.json").is_file() or (path / "adapter_config.json").is_file()


@pytest.fixture(scope="module")
def learner():
    return Identity.generate()


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, learner):
    cfg = run_config(learner)
    model = nudged(load_model(cfg.model, cfg.task))
    root = tmp_path_factory.mktemp("full")
    return cfg, model, data_dir(root, cfg, learner, model.state_dict())


def test_a_version_exports_as_a_directory_that_loads_with_the_learners_logprobs(full_run, learner, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg, model, d = full_run
    result = run_export(str(d), tmp_path / "out", cfg=None, card=None)
    out = tmp_path / "out"
    assert result["version"] == 3 and result["kind"] == "model" and result["signer"] == learner.peer_id
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "README.md"):
        assert (out / name).is_file(), name
    loaded = AutoModelForCausalLM.from_pretrained(out)
    assert torch.allclose(logprobs(loaded), logprobs(model), atol=1e-5)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.decode(tokenizer("12+7=19")["input_ids"]) == "12+7=19"
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["temperature"] == cfg.sampler.temperature and gen["max_new_tokens"] == cfg.sampler.max_completion_length
    card = (out / "README.md").read_text()
    for fact in (RUN, "| version | 3 |", learner.peer_id, cfg.task.name, read_facts(out).base_digest):
        assert fact in card, fact
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary sibling left


def test_a_lora_version_exports_an_adapter_peft_loads_and_a_merged_model_equal_to_it(learner, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = run_config(learner, LORA)
    base = load_model(cfg.model, cfg.task)
    spec = adapter_spec(cfg.learner.lora, weights_hash(base.state_dict()))
    trained = nudged(apply_lora(base, cfg.learner.lora))
    d = data_dir(tmp_path, cfg, learner, adapter_state(trained), version=5, adapter=spec)

    assert run_export(str(d), tmp_path / "adapter", cfg=None, card=None)["kind"] == "adapter"
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    applied = PeftModel.from_pretrained(load_model(cfg.model, cfg.task), str(tmp_path / "adapter"))
    assert torch.allclose(logprobs(applied), logprobs(trained), atol=1e-5)

    assert run_export(str(d), tmp_path / "merged", cfg=None, card=None, merge=True)["kind"] == "merged"
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert torch.allclose(logprobs(merged), logprobs(applied), atol=1e-4)
    assert "merged" in (tmp_path / "merged" / "README.md").read_text()


def export_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-m", "swarmnode", "export", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_no_dir(done: subprocess.CompletedProcess, code: int, text: str, out: Path) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == code and len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], (
        done.returncode,
        done.stderr,
    )
    assert not out.exists() and not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]


@pytest.mark.slow  # four CLI processes (~30 s loaded); CI's long-scenario step runs it
@pytest.mark.usefixtures("starts_processes")
def test_each_failure_is_one_line_with_its_exit_code_and_leaves_no_directory(full_run, tmp_path):
    cfg, _model, d = full_run
    out = tmp_path / "out"
    assert_one_line_no_dir(export_cli(str(d), "--out", str(out), "--version", "9"), 3, "version 9 is not held", out)

    other = tmp_path / "other"  # the same weights, but the run names another learner key
    other.mkdir()
    write_run_info(other, run_config(Identity.generate()))
    os.symlink(d / "weights", other / "weights")
    assert_one_line_no_dir(export_cli(str(other), "--out", str(out)), 2, "not one of the run's learner keys", out)

    corrupt = tmp_path / "corrupt"
    subprocess.run(["cp", "-r", str(d), str(corrupt)], check=True)
    chunk = max((corrupt / "weights" / "chunks").iterdir(), key=lambda p: p.stat().st_size)
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    assert_one_line_no_dir(export_cli(str(corrupt), "--out", str(out)), 3, "missing or corrupt", out)

    if os.geteuid() != 0:
        pytest.skip("the full-disk case mounts a small tmpfs: needs root")
    fs = tmp_path / "fs"
    fs.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(fs)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        assert_one_line_no_dir(export_cli(str(d), "--out", str(fs / "out")), 1, "disk full", fs / "out")
    finally:
        subprocess.run(["umount", "-l", str(fs)])


def test_a_failed_write_leaves_no_directory_and_an_existing_one_is_refused(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), staged_dir(out) as tmp:
        (tmp / "config.json").write_text("{}")
        raise RuntimeError("the writer died")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    out.mkdir()
    (out / "x").write_text("mine")
    with pytest.raises(Exception, match="exists and is not empty") as caught, staged_dir(out):
        pass
    assert caught.value.exit_code == ExitCode.USAGE and (out / "x").read_text() == "mine"


def test_saving_every_n_versions_keeps_the_last_k_and_a_failed_push_is_one_line(
    full_run, learner, tmp_path, monkeypatch
):
    import socket

    with socket.socket() as s:  # a port nobody listens on: the Hub unreachable
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_token")
    cfg = run_config(
        learner,
        ["learner.save_every=2", "learner.save_total_limit=2", "learner.push_to_hub=true", "learner.hub_model_id=me/x"],
    )
    _cfg, model, _d = full_run
    d = tmp_path / "learner"
    store = WeightStore(d / "weights", RUN, keep_versions=2)
    lines: list[str] = []
    saver = VersionSaver(cfg, d, store, lines.append)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for version in range(1, 8):
        store.publish(version, state, learner)
        saver.poll()
        saver.close()
    assert saver.saved == [2, 4, 6] and saved_versions(d / "exports") == [4, 6], lines
    pushes = [line for line in lines if line.startswith("push: ")]
    assert len(pushes) == 3 and all("\n" not in p and "me/x failed" in p and "training goes on" in p for p in pushes)
    assert f"swarmnode: run {RUN}" not in "".join(pushes)  # nothing reached a hub
    assert read_facts(d / "exports" / "v6").version == 6


def test_the_disk_need_counts_the_saved_directories(learner):
    from swarmnode.node.disk_need import disk_need, format_disk
    from swarmnode.node.hardware import estimate_memory

    off = run_config(learner)
    on = run_config(learner, ["learner.save_every=10", "learner.save_total_limit=3"])
    need_off, need_on = disk_need(off, estimate_memory(off)), disk_need(on, estimate_memory(on))
    assert need_off["exports_bytes"] == 0 and need_on["exports_bytes"] == 4 * need_on["version_bytes"]
    assert need_on["learner_bytes"] - need_off["learner_bytes"] == need_on["exports_bytes"]
    assert "4 saved model dirs" in format_disk(need_on)
