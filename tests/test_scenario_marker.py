"""The `scenario` marker comes from the fixtures a test requests (tests/conftest.py): a test that starts processes
(the CLI in a subprocess, a swarm behind a module fixture) is a scenario, a pure unit test is not, and the watch
that keeps the declaration true names every way a process starts."""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess
from pathlib import Path

import pytest
from process_helpers import processes_started

TESTS = Path(__file__).resolve().parent

# (test id, whether it starts processes): a direct request, a module fixture's request, a plain unit test
KNOWN = {
    "tests/test_cli_errors.py::test_unknown_preset_lists_the_presets": True,
    "tests/test_dashboard.py::test_status_json_fits_the_schema_during_a_run": True,
    "tests/test_backoff.py::test_without_jitter_the_delays_double_exactly_up_to_the_cap_and_success_starts_over": False,
}


class _Collected:
    """A pytest plugin that keeps the collected items of a nested session."""

    def __init__(self) -> None:
        self.items: dict[str, pytest.Item] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.items = {item.nodeid: item for item in session.items}


def test_a_test_is_a_scenario_exactly_when_it_requests_a_process_fixture():
    collected = _Collected()
    root = TESTS.parent
    code = pytest.main(
        [
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:benchmark",
            "--rootdir",
            str(root),
            *(str(root / k) for k in KNOWN),
        ],
        plugins=[collected],
    )
    assert code == pytest.ExitCode.OK
    assert set(collected.items) == set(KNOWN)
    for nodeid, starts in KNOWN.items():
        assert ("scenario" in collected.items[nodeid].keywords) is starts, nodeid


def test_the_watch_names_each_way_a_process_starts_and_lets_it_start(monkeypatch):
    """Every entry point is replaced by a stub first, so nothing starts here; the watch wraps the stubs."""
    calls: list[str] = []
    for owner, name in [
        (subprocess, "_fork_exec"),
        (os, "posix_spawn"),
        (os, "fork"),
        (os, "system"),
        (multiprocessing.process.BaseProcess, "start"),
    ]:
        monkeypatch.setattr(owner, name, lambda *args, _name=name, **kwargs: calls.append(_name))
    with processes_started() as started:
        subprocess._fork_exec(["p2pd", "-listen"])
        os.posix_spawn("/bin/true", ["true"], {})
        os.fork()
        os.system("true")
        multiprocessing.process.BaseProcess.start(multiprocessing.Process(target=print))
    assert calls == ["_fork_exec", "posix_spawn", "fork", "system", "start"]
    assert [s.split(" ")[0] for s in started] == [
        "subprocess",
        "posix_spawn",
        "os.fork",
        "os.system",
        "multiprocessing",
    ]
    assert "p2pd" in started[0] and "print" in started[-1]


def test_the_standard_librarys_probes_of_the_system_are_no_process_a_test_starts(monkeypatch):
    monkeypatch.setattr(subprocess, "_fork_exec", lambda *args, **kwargs: 0)
    with processes_started() as started:
        subprocess._fork_exec(["/sbin/ldconfig", "-p"])  # ctypes.util.find_library("c")
        subprocess._fork_exec([b"file", b"-b", b"/usr/bin/python3"])  # platform.architecture()
        subprocess._fork_exec(["/usr/bin/ip", "netns", "add", "lab"])
    assert started == ["subprocess ['/usr/bin/ip', 'netns', 'add', 'lab']"]
