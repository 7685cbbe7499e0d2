"""Shared fixtures: an isolated SWARMNODE_HOME per session (the tiny model is built once), --runslow, the
`cuda` marker (skipped without a GPU), and the `scenario` marker: every test of a module that starts real
processes or daemons (nodes, p2pd, the CLI) is a scenario, the rest are fast unit tests (`pytest -m "not
scenario"`)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

# what a test module that starts real processes or daemons uses
SCENARIO_SIGNS = ("LocalSwarm", "subprocess", "P2P.create", "TmuxDashboard", "swarmnode_cmd", "Membership", "p2pd")


@functools.cache
def starts_processes(module: Path) -> bool:
    """Whether a test module starts real processes or daemons (read from its source)."""
    text = module.read_text()
    return any(sign in text for sign in SCENARIO_SIGNS)


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if any("cuda" in item.keywords for item in items) and not _cuda_available():
        no_gpu = pytest.mark.skip(reason="needs a CUDA GPU: run `python -m pytest -m cuda` on a GPU machine")
        for item in items:
            if "cuda" in item.keywords:
                item.add_marker(no_gpu)
    for item in items:
        if starts_processes(Path(str(item.fspath))):
            item.add_marker(pytest.mark.scenario)
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow scenario: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def swarmnode_home(tmp_path_factory):
    """Every test (and every subprocess it starts) uses a private data dir, never the user's."""
    home = os.environ.get("SWARMNODE_TEST_HOME") or str(tmp_path_factory.mktemp("swarmnode-home"))
    os.environ["SWARMNODE_HOME"] = home
    yield home
