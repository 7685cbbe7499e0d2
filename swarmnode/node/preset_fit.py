"""Which shipped GPU presets fit this machine: `swarmnode hardware` names them.

A preset fits as a learner when its training estimate (LoRA's when the preset trains adapters) fits the best
GPU's free memory with the same headroom the role decision uses, and as a sampler when its inference estimate
does. Only presets whose model's architecture is known offline are sized (no download to answer this).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from swarmnode.config import load_config
from swarmnode.config.files import preset_names
from swarmnode.errors import SwarmnodeError
from swarmnode.model.models import KNOWN_ARCHITECTURES
from swarmnode.model.packaged import packaged_model
from swarmnode.node.hardware import GPU_RESERVED_BYTES, HardwareProbe, _fits, estimate_memory

CPU_PRESETS = ("tiny-cpu", "smollm2-135m")  # what a machine without a GPU runs (the demo; CPU sampling)


def missing_install(name: str) -> str | None:
    """The one command that installs what preset `name` needs and is missing here (a packaged model), or None."""
    packaged = packaged_model(load_config(name).model.name)
    if packaged is None or importlib.util.find_spec(packaged.module) is not None:
        return None
    return packaged.install


def cpu_presets() -> list[str]:
    """The CPU presets, each one that needs an install first saying so (`smollm2-135m (first: pip install ...)`)."""
    return [name if (cmd := missing_install(name)) is None else f"{name} (first: {cmd})" for name in CPU_PRESETS]


def gpu_presets() -> list[str]:
    """Shipped presets whose model is sized without a download (the GPU ones)."""
    names = []
    for name in preset_names():
        try:
            if load_config(name).model.name in KNOWN_ARCHITECTURES:
                names.append(name)
        except SwarmnodeError:  # a broken user file in ./configs must not break `hardware`
            continue
    return names


def preset_fit(probe: HardwareProbe) -> dict:
    """{'presets': [per preset: name, training, learner/sampler bytes and fit], 'learner': best learner preset,
    'sampler': best sampler preset} for this machine's best GPU (None where nothing fits or no GPU)."""
    gpu = probe.best_gpu()
    if gpu is None:
        return {"presets": [], "learner": None, "sampler": None, "cpu_presets": cpu_presets()}
    rows: list[dict[str, Any]] = []
    for name in gpu_presets():
        cfg = load_config(name)
        est = estimate_memory(cfg)
        rows.append(
            {
                "name": name,
                "model": cfg.model.name,
                "parameters": est.parameters,
                "training": f"LoRA r={cfg.learner.lora.r}" if cfg.learner.lora.enabled else "full",
                "learner_bytes": est.training_bytes,
                "sampler_bytes": est.inference_bytes,
                "learner_fits": _fits(est.training_bytes, gpu.free_bytes, GPU_RESERVED_BYTES),
                "sampler_fits": _fits(est.inference_bytes, gpu.free_bytes, GPU_RESERVED_BYTES),
            }
        )

    def biggest(key: str) -> str | None:
        fitting = [r for r in rows if r[key]]
        # the largest model that fits; between equals, full training over LoRA
        best = max(fitting, key=lambda r: (r["parameters"], r["training"] == "full"), default=None)
        return best["name"] if best else None

    return {
        "presets": rows,
        "learner": biggest("learner_fits"),
        "sampler": biggest("sampler_fits"),
        "cpu_presets": cpu_presets(),
    }


def format_fit(fit: dict) -> list[str]:
    """Lines for `swarmnode hardware`: the preset to learn with and to sample with on this machine."""
    if not fit["presets"]:
        return [f"presets for this machine (no GPU): {', '.join(fit['cpu_presets'])}"]
    lines = [
        f"preset to learn with here: {fit['learner'] or 'none of the shipped ones fits'}; "
        f"to sample with: {fit['sampler'] or 'none fits'}"
    ]
    for r in fit["presets"]:
        lines.append(
            f"  {r['name']}: {r['training']} learner ~{r['learner_bytes'] / 1024**3:.1f} GiB "
            f"({'fits' if r['learner_fits'] else 'does not fit'}), sampler "
            f"~{r['sampler_bytes'] / 1024**3:.1f} GiB ({'fits' if r['sampler_fits'] else 'does not fit'})"
        )
    return lines
