"""The role decision on synthetic hardware (24 GB GPU, 8 GB GPU, CPU-only; tiny vs 1.7B), the estimates, the probe
and `swarmnode hardware --json` on this machine."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_config import run_cli

from swarmnode.config import load_config
from swarmnode.node.hardware import (
    GiB,
    GPUInfo,
    HardwareProbe,
    ModelShape,
    decide_role,
    estimate_from_shape,
    estimate_memory,
    probe_hardware,
)

GB = 10**9
QWEN3_4B = ModelShape(
    parameters=4_022_468_096,
    hidden_size=2560,
    num_layers=36,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=151_936,
    num_heads=32,
    intermediate_size=9728,
)  # published config.json


def gpu_machine(total_gb: float, used_gb: float = 0.5) -> HardwareProbe:
    total = int(total_gb * GB)
    return HardwareProbe(
        (GPUInfo(0, f"Synthetic {total_gb:g}GB", total, total - int(used_gb * GB)),), 8, 64 * GB, 60 * GB
    )


def cpu_machine(ram_gb: float = 16) -> HardwareProbe:
    return HardwareProbe((), 4, int(ram_gb * GB), int(ram_gb * GB * 0.8))


@pytest.fixture(scope="module")
def estimates():
    return {
        "tiny": estimate_memory(load_config("tiny-cpu")),
        "0.6b": estimate_memory(load_config("qwen3-0.6b-math")),
        "1.7b": estimate_memory(load_config("qwen3-1.7b-math-gepo")),
        "1.7b-lora": estimate_memory(load_config("qwen3-1.7b-math-gepo", ["learner.lora.enabled=true"])),
        "4b-lora": estimate_from_shape(
            QWEN3_4B,
            load_config(
                "qwen3-1.7b-math-gepo",
                ["model.name=Qwen/Qwen3-4B", "learner.lora.enabled=true", "learner.max_tokens_per_microbatch=16384"],
            ),
        ),
    }


def test_parameter_counts_match_the_published_sizes(estimates):
    assert estimates["tiny"].parameters < 1_000_000
    assert estimates["0.6b"].parameters == pytest.approx(0.6e9, rel=0.05)
    assert estimates["1.7b"].parameters == pytest.approx(1.72e9, rel=0.05)


def test_training_estimate_has_weights_grads_and_fp32_adam(estimates):
    e = estimates["1.7b"]
    assert e.weights_bytes == e.parameters * 2  # bfloat16, as a sampler holds them
    assert e.training["weights"] == e.parameters * 4  # the learner's fp32 master weights (bf16 autocast)
    assert e.grads_bytes == e.parameters * 4
    assert e.optimizer_bytes == e.parameters * 8  # fp32 m and v
    assert e.training_bytes > e.training["weights"] + e.grads_bytes + e.optimizer_bytes  # plus activations
    assert e.lora_training_bytes < e.training_bytes / 2
    assert e.inference_bytes > e.weights_bytes  # plus KV cache
    # Qwen3-1.7B KV: 2 x 28 layers x 8 kv heads x 128 dims x 2 bytes per token, one group of 8 x (512 + 4096)
    assert e.kv_cache_bytes == 2 * 28 * 8 * 128 * 2 * (512 + 4096) * 8


def test_settings_move_the_estimate_the_right_way():
    base = load_config("qwen3-0.6b-math")
    e = estimate_memory(base)
    longer = estimate_memory(load_config("qwen3-0.6b-math", ["sampler.max_completion_length=4096"]))
    no_ckpt = estimate_memory(load_config("qwen3-0.6b-math", ["model.gradient_checkpointing=false"]))
    fp32 = estimate_memory(load_config("qwen3-0.6b-math", ["model.dtype=float32"]))
    split = estimate_memory(load_config("qwen3-0.6b-math", ["learner.max_tokens_per_microbatch=2048"]))
    lora = estimate_memory(load_config("qwen3-0.6b-math", ["learner.lora.enabled=true"]))
    assert longer.kv_cache_bytes > e.kv_cache_bytes and longer.training_bytes > e.training_bytes
    assert no_ckpt.training_activation_bytes > e.training_activation_bytes
    assert split.training_activation_bytes < e.training_activation_bytes
    assert lora.training_bytes == e.lora_training_bytes < e.training_bytes
    assert lora.optimizer_bytes < e.optimizer_bytes / 50  # adapters only
    assert fp32.weights_bytes == 2 * e.weights_bytes


# (machine, model) -> role with role=auto and a free learner seat
DECISION_TABLE = [
    ("24GB", "tiny", "learner"),
    ("24GB", "0.6b", "learner"),
    ("24GB", "1.7b", "sampler"),  # 1.7B training (AdamW fp32 states + logits) does not fit 24 GB
    ("8GB", "tiny", "learner"),
    ("8GB", "0.6b", "sampler"),
    ("8GB", "1.7b", "none"),  # bf16 weights + a 4.6k-token group's KV cache exceed 8 GB
    ("cpu", "tiny", "learner"),  # the tiny model may train on CPU so the demo runs anywhere
    ("cpu", "0.6b", "sampler"),  # under 1B: CPU sampling allowed
    ("cpu", "1.7b", "none"),  # over 1B: CPU-only nodes do not sample it
    ("141GB", "1.7b", "learner"),  # an H200-class GPU trains the paper's setup
    ("24GB", "1.7b-lora", "learner"),  # ... and a 24 GB GPU with LoRA (estimated; docs/learner-memory.md)
    ("24GB", "4b-lora", "learner"),  # Qwen3-4B with LoRA and a 16k-token micro-batch
]
MACHINES = {"24GB": gpu_machine(24), "8GB": gpu_machine(8), "cpu": cpu_machine(16), "141GB": gpu_machine(141)}


@pytest.mark.parametrize(("machine", "model", "expected"), DECISION_TABLE)
def test_decision_table(estimates, machine, model, expected):
    decision = decide_role(MACHINES[machine], estimates[model], "auto", learners_in_run=0, max_learners=1)
    assert decision.role == expected, decision.reasons
    assert decision.reasons and all(isinstance(r, str) and r for r in decision.reasons)
    assert decision.device == ("cpu" if machine == "cpu" else "cuda:0")
    assert expected in decision.reasons[-1]  # the last reason states the outcome


def test_cpu_reasons_state_the_rules(estimates):
    reasons = " ".join(decide_role(cpu_machine(), estimates["1.7b"]).reasons)
    assert "1B parameters" in reasons and "never train" in reasons


def test_full_run_makes_a_would_be_learner_a_sampler(estimates):
    full = decide_role(gpu_machine(24), estimates["tiny"], "auto", learners_in_run=1, max_learners=1)
    assert full.role == "sampler" and "1/1 learners" in full.reasons[-1]
    wants_two = decide_role(gpu_machine(24), estimates["tiny"], "auto", learners_in_run=1, max_learners=2)
    assert wants_two.role == "learner"
    unknown = decide_role(gpu_machine(24), estimates["tiny"], "auto", learners_in_run=None)
    assert unknown.role == "learner"


def test_explicit_role_is_obeyed_with_a_warning_when_it_does_not_fit(estimates):
    forced = decide_role(cpu_machine(), estimates["1.7b"], "learner")
    assert forced.role == "learner"
    assert any(r.startswith("warning:") for r in forced.reasons)
    fine = decide_role(gpu_machine(24), estimates["1.7b"], "sampler")
    assert fine.role == "sampler" and not any(r.startswith("warning:") for r in fine.reasons)


def test_unknown_role_is_refused(estimates):
    with pytest.raises(ValueError, match="auto, sampler or learner"):
        decide_role(cpu_machine(), estimates["tiny"], "trainer")


def test_best_gpu_is_the_one_with_most_free_memory():
    probe = HardwareProbe(
        (GPUInfo(0, "busy", 80 * GB, 2 * GB), GPUInfo(1, "idle", 24 * GB, 23 * GB)), 8, 64 * GB, 60 * GB
    )
    assert probe.best_gpu().index == 1
    assert probe.summary()["gpu"] == "idle" and probe.summary()["gpu_count"] == 2
    assert cpu_machine().best_gpu() is None


RANK = {"none": 0, "sampler": 1, "learner": 2}


@settings(max_examples=200, deadline=None)
@given(free_gb=st.floats(0.1, 200), more_gb=st.floats(0, 200), model=st.sampled_from(["tiny", "0.6b", "1.7b"]))
def test_more_free_memory_never_demotes(estimates, free_gb, more_gb, model):
    def on(gb):
        return HardwareProbe((GPUInfo(0, "g", int(400 * GB), int(gb * GB)),), 4, 16 * GB, 8 * GB)

    low = decide_role(on(free_gb), estimates[model], learners_in_run=0)
    high = decide_role(on(free_gb + more_gb), estimates[model], learners_in_run=0)
    assert RANK[high.role] >= RANK[low.role]
    if free_gb * GB >= estimates[model].training_bytes * 1.2 + GiB:
        assert low.role == "learner"


def test_estimate_is_pure_in_the_config(estimates):
    cfg = load_config("tiny-cpu")
    assert estimate_memory(cfg) == estimates["tiny"]
    assert replace(estimates["tiny"], notes=()).training_bytes == estimates["tiny"].training_bytes


def test_probe_of_this_machine():
    probe = probe_hardware()
    assert probe.cpu_count >= 1
    assert 0 < probe.ram_available_bytes <= probe.ram_total_bytes
    for gpu in probe.gpus:
        assert 0 <= gpu.free_bytes <= gpu.total_bytes and gpu.name


@pytest.mark.usefixtures("starts_processes")
def test_cli_hardware_json():
    result = run_cli("hardware", "--json", "--config", "tiny-cpu")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["role"] in ("sampler", "learner")  # the tiny model fits any machine that runs this suite
    assert report["probe"]["cpu_count"] >= 1 and "gpus" in report["probe"]
    assert report["estimate"]["model_name"] == "builtin:tiny"
    assert report["reasons"]


@pytest.mark.usefixtures("starts_processes")
def test_cli_hardware_role_override_and_text():
    result = run_cli("hardware", "--config", "qwen3-1.7b-math-gepo", "--role", "sampler")
    assert result.returncode == 0, result.stderr
    assert "role: sampler" in result.stdout and "requested explicitly" in result.stdout
    bad = run_cli("hardware", "--config", "tiny-cpu", "--role", "boss")
    assert bad.returncode == 2 and "role" in bad.stderr and "Traceback" not in bad.stderr


def test_cpu_pinned_config_ignores_gpus(estimates):
    from swarmnode.node.hardware import hardware_report

    gpu = gpu_machine(24)
    tiny, qwen = load_config("tiny-cpu"), load_config("qwen3-0.6b-math")
    assert gpu.for_devices(tiny.sampler.device, tiny.learner.device).gpus == ()  # tiny-cpu pins both roles to the CPU
    assert gpu.for_devices(qwen.sampler.device, qwen.learner.device) is gpu
    report = hardware_report(load_config("tiny-cpu"), probe=gpu)
    assert report["device"] == "cpu" and not report["probe"]["gpus"]
    report = hardware_report(load_config("tiny-cpu", ["sampler.device=auto", "learner.device=auto"]), probe=gpu)
    assert report["device"] == "cuda:0" and report["role"] == "learner"


def test_a_gpu_too_small_for_full_training_is_told_lora_fits(estimates):
    reasons = decide_role(gpu_machine(24), estimates["1.7b"], "auto", learners_in_run=0).reasons
    assert any("LoRA learner" in r and "learner.lora.enabled=true" in r for r in reasons), reasons
    assert not any("LoRA" in r for r in decide_role(gpu_machine(8), estimates["1.7b"], "auto").reasons)


def test_beta_counts_the_reference_model_in_the_models_dtype(estimates):
    from swarmnode.node.hardware import format_report, hardware_report

    plain = estimates["1.7b"]
    cfg = load_config("qwen3-1.7b-math-gepo", ["learner.beta=0.04"])
    with_ref = estimate_memory(cfg)
    assert with_ref.training["reference"] == plain.parameters * 2  # a bf16 copy, as TRL's reference model
    assert with_ref.training_bytes == plain.training_bytes + plain.parameters * 2
    assert with_ref.training["first_step"] == plain.training["first_step"] + plain.parameters * 2
    lora = estimate_memory(load_config("qwen3-1.7b-math-gepo", ["learner.beta=0.04", "learner.lora.enabled=true"]))
    assert lora.training["reference"] == 0  # the base with its adapters off: no copy
    text = format_report(hardware_report(cfg, probe=gpu_machine(80)))
    assert "reference model" in text and "reference copy of the weights in bfloat16" in text
