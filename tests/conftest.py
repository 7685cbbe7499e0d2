"""Shared fixtures: an isolated SWARMNODE_HOME per session (the tiny model is built once), --runslow, the
`cuda` marker (skipped without a GPU), and the `scenario` marker.

A test that starts real processes or daemons (nodes, p2pd, a hivemind DHT, vLLM's engine, the CLI in a
subprocess) requests a fixture of PROCESS_FIXTURES: itself (`@pytest.mark.usefixtures("starts_processes")`), through
a fixture that requests one, or for a whole module (`pytestmark = pytest.mark.usefixtures("starts_processes")`).
Such a test is marked `scenario`; the rest are fast unit tests (`pytest -m "not scenario"`), and one of them that
starts a process all the same fails, naming the process (`process_helpers`)."""

from __future__ import annotations

import os

import pytest
from process_helpers import processes_started

# the fixtures that start processes or daemons, or declare that the test does: their tests are `scenario`
PROCESS_FIXTURES = frozenset({"starts_processes"})


@pytest.fixture(scope="session")
def starts_processes() -> None:
    """Requested by a test, or a fixture, that starts real processes or daemons: its tests are `scenario`."""


def is_scenario(item: pytest.Item) -> bool:
    """Whether a test starts real processes or daemons: a fixture of PROCESS_FIXTURES is in its closure."""
    return not PROCESS_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


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
        if is_scenario(item):
            item.add_marker(pytest.mark.scenario)
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow scenario: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _no_undeclared_processes(request):
    """A fast unit test starts no process: one that does fails here, naming it (request `starts_processes`)."""
    if "scenario" in request.node.keywords:
        yield
        return
    with processes_started() as started:
        yield
    if started:
        pytest.fail(
            f"{request.node.nodeid} started {len(started)} process(es) ({'; '.join(started[:3])}) without "
            "requesting the `starts_processes` fixture (tests/conftest.py): request it, so the test is a `scenario`",
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def swarmnode_home(tmp_path_factory):
    """Every test (and every subprocess it starts) uses a private data dir, never the user's."""
    home = os.environ.get("SWARMNODE_TEST_HOME") or str(tmp_path_factory.mktemp("swarmnode-home"))
    os.environ["SWARMNODE_HOME"] = home
    yield home
