"""Presets live in the top-level `configs/` and ship inside the wheel (the same files): they load from any
directory, and a user's own YAML file or `./configs/` directory still works beside them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from swarmnode.config.files import shipped_presets

REPO = Path(__file__).resolve().parent.parent
CLONE_PRESETS = sorted(p.name for p in (REPO / "configs").glob("*.yaml"))


def _python_in(cwd: Path, code: str) -> str:
    """Run `code` in a fresh interpreter whose current directory is `cwd`, importing this checkout's package."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_presets_live_in_the_top_level_configs_directory():
    assert "tiny-cpu.yaml" in CLONE_PRESETS and "smollm2-135m.yaml" in CLONE_PRESETS
    assert Path(str(shipped_presets())) == REPO / "configs"  # a clone reads them where they are
    assert not (REPO / "swarmnode" / "config" / "presets").exists(), "one source: the presets are in configs/"


@pytest.mark.usefixtures("starts_processes")
def test_presets_load_from_a_directory_outside_the_clone(tmp_path):
    out = _python_in(
        tmp_path,
        "from swarmnode.config import load_config, preset_names; "
        "print(' '.join(preset_names())); print(load_config('tiny-cpu').run_id)",
    )
    names, run_id = out.splitlines()
    assert sorted(f"{n}.yaml" for n in names.split()) == CLONE_PRESETS and run_id == "tiny-demo"


@pytest.mark.usefixtures("starts_processes")
def test_a_users_configs_directory_and_own_file_still_work(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.yaml").write_text("run_id: my-run\n")
    (tmp_path / "configs" / "tiny-cpu.yaml").write_text("run_id: my-tiny\n")  # a local file hides the shipped one
    (tmp_path / "elsewhere.yaml").write_text("run_id: from-a-path\n")
    out = _python_in(
        tmp_path,
        "from swarmnode.config import load_config; "
        "print(load_config('mine').run_id, load_config('tiny-cpu').run_id, "
        f"load_config({str(tmp_path / 'elsewhere.yaml')!r}).run_id)",
    )
    assert out.split() == ["my-run", "my-tiny", "from-a-path"]


@pytest.mark.usefixtures("starts_processes")
def test_the_wheel_carries_the_same_presets(tmp_path):
    """Build a wheel from a copy of the clone (no network: the build backend installed here), look inside, and
    list the presets from the installed wheel alone: the same names as the clone's `configs/`."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "configs", src / "configs")
    shutil.copytree(REPO / "swarmnode", src / "swarmnode", ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("swarmnode-*.whl")
    inside = sorted(
        n.removeprefix("swarmnode/config/presets/")
        for n in zipfile.ZipFile(wheel).namelist()
        if n.startswith("swarmnode/config/presets/")
    )
    assert inside == CLONE_PRESETS
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    listed = subprocess.run(
        [sys.executable, "-c", "from swarmnode.config import preset_names; print(' '.join(preset_names()))"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert sorted(f"{n}.yaml" for n in listed.stdout.split()) == CLONE_PRESETS
