"""Checks that need a CUDA GPU (marker `cuda`; skipped without one). On a GPU machine: python -m pytest -m cuda"""

from __future__ import annotations

import pytest
import torch

from swarmnode.config import load_config
from swarmnode.learner.precision import Precision

pytestmark = pytest.mark.cuda
CUDA = torch.device("cuda") if torch.cuda.is_available() else None


def test_self_check_runs_every_part_on_the_gpu():
    from swarmnode.node.selfcheck import format_selfcheck, run_selfcheck

    report = run_selfcheck(load_config("tiny-cpu"), "cuda")
    assert report["device"].startswith("cuda")
    assert report["step"]["peak_measured_by"] == "torch.cuda.max_memory_allocated"
    assert report["step"]["peak_bytes"] > 0 and report["fp16"]["scaled"]["finite"]
    assert "error" not in format_selfcheck(report)


def test_fp16_lora_gradients_with_the_scaler_have_no_silent_zeros_on_the_gpu():
    from swarmnode.node.selfcheck.fp16 import fp16_gradients

    cfg = load_config("tiny-cpu", ["learner.lora.enabled=true", "learner.learning_rate=1e-4"])
    scaled = fp16_gradients(cfg, CUDA)["scaled"]
    assert scaled["cosine"] > 0.99 and scaled["zeroed_fraction"] < 1e-3 and scaled["tensors_without_gradient"] == 0


def test_bf16_model_on_the_gpu_autocasts_in_bf16_or_fp16_with_a_scaler():
    precision = Precision.from_config(load_config("tiny-cpu", ["model.dtype=bfloat16"]), CUDA)
    if torch.cuda.is_bf16_supported():
        assert precision.autocast_dtype == torch.bfloat16 and precision.scaler is None
    else:
        assert precision.autocast_dtype == torch.float16 and precision.scaler is not None
