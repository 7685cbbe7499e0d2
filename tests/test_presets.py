"""Presets ship inside the package: a wheel carries them, they load from any directory, and a user's own YAML
file or `./configs/` directory still works beside them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from importlib.resources import files
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHIPPED = files("swarmnode.config") / "presets"


def _python_in(cwd: Path, code: str) -> str:
    """Run `code` in a fresh interpreter whose current directory is `cwd`, importing this checkout's package."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_every_preset_lives_inside_the_package():
    names = sorted(p.name for p in SHIPPED.iterdir() if p.name.endswith(".yaml"))
    assert "tiny-cpu.yaml" in names and "smollm2-135m.yaml" in names
    stray = sorted(p.name for p in (REPO / "configs").glob("*.yaml"))
    assert not stray, f"presets outside the package do not ship in the wheel: move {stray} to swarmnode/config/presets/"


def test_presets_load_from_a_directory_outside_the_clone(tmp_path):
    out = _python_in(tmp_path, "from swarmnode.config import load_config, preset_names; "
                               "print(' '.join(preset_names())); print(load_config('tiny-cpu').run_id)")
    names, run_id = out.splitlines()
    assert "tiny-cpu" in names.split() and run_id == "tiny-demo"


def test_a_users_configs_directory_and_own_file_still_work(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "mine.yaml").write_text("run_id: my-run\n")
    (tmp_path / "configs" / "tiny-cpu.yaml").write_text("run_id: my-tiny\n")  # a local file hides the shipped one
    (tmp_path / "elsewhere.yaml").write_text("run_id: from-a-path\n")
    out = _python_in(tmp_path, "from swarmnode.config import load_config; "
                               "print(load_config('mine').run_id, load_config('tiny-cpu').run_id, "
                               f"load_config({str(tmp_path / 'elsewhere.yaml')!r}).run_id)")
    assert out.split() == ["my-run", "my-tiny", "from-a-path"]


def test_the_wheel_carries_the_presets(tmp_path):
    """Build a wheel from a copy of the package (no network: the build backend installed here) and look inside."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "swarmnode", src / "swarmnode", ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("swarmnode-*.whl")
    inside = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"swarmnode/config/presets/{p.name}" for p in SHIPPED.iterdir() if p.name.endswith(".yaml")}
    assert shipped and shipped <= inside
