"""Shared fixtures: an isolated SWARMNODE_HOME per session (the tiny model is built once), --runslow, and
the `cuda` marker (skipped without a GPU)."""

from __future__ import annotations

import os

import pytest


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
