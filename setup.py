"""The one thing pyproject.toml cannot say: the wheel ships the presets of the top-level `configs/` as
`swarmnode/config/presets/` (one source; a clone reads `configs/` directly, see `swarmnode.config.files`)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CONFIGS = Path(__file__).resolve().parent / "configs"


class BuildWithPresets(build_py):
    """build_py, plus configs/*.yaml copied into the built package as swarmnode/config/presets/."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "swarmnode" / "config" / "presets"
        target.mkdir(parents=True, exist_ok=True)
        for preset in sorted(CONFIGS.glob("*.yaml")):
            shutil.copyfile(preset, target / preset.name)


setup(cmdclass={"build_py": BuildWithPresets})
