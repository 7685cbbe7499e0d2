"""Every package's `__init__` docstring is its map: it names each of its modules and subpackages, and every
top-level module or package of swarmnode sits in the import contracts (`lint-imports`)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import tomllib
from pathlib import Path

import pytest

import swarmnode

ROOT = Path(swarmnode.__file__).parent
PYPROJECT = ROOT.parent / "pyproject.toml"


def _packages() -> list[str]:
    names = ["swarmnode"]
    for info in pkgutil.walk_packages([str(ROOT)], prefix="swarmnode."):
        if info.ispkg:
            names.append(info.name)
    return names


GENERATED = {"swarmnode._version"}  # written at build by setuptools-scm (pyproject.toml), not kept in git


def _children(package: str) -> list[str]:
    path = ROOT.parent.joinpath(*package.split("."))
    return sorted(info.name for info in pkgutil.iter_modules([str(path)]) if f"{package}.{info.name}" not in GENERATED)


@pytest.mark.parametrize("package", _packages())
def test_the_package_map_names_every_module(package):
    doc = importlib.import_module(package).__doc__ or ""
    missing = [name for name in _children(package) if f"`{name}`" not in doc]
    assert not missing, f"{package}'s docstring (its package map) does not name {missing}: add a line each"


def test_every_top_level_module_sits_in_an_import_contract():
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    named = set(re.findall(r"swarmnode\.(\w+)", str(contracts)))
    missing = [name for name in _children("swarmnode") if name not in named]
    assert not missing, f"no import contract in pyproject.toml names {missing}"


def test_the_contract_table_in_architecture_md_names_every_module_of_the_contracts():
    """docs/architecture.md's table of the import contracts names every module a contract in pyproject.toml does
    (by its last name: `join` for swarmnode.node.join)."""
    doc = (ROOT.parent / "docs" / "architecture.md").read_text()
    table = doc[doc.index("| contract | what it says |") :].split("\n\n")[0]
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    named = {
        name.strip()
        for contract in contracts
        for key in ("layers", "source_modules", "forbidden_modules", "protected_modules", "allowed_importers")
        for entry in contract.get(key, [])
        for name in re.split(r"[:|]", entry)
    }
    missing = sorted(m for m in named if m.startswith("swarmnode") and f"`{m.split('.')[-1]}`" not in table)
    assert not missing, f"docs/architecture.md's contract table leaves out {missing}"
