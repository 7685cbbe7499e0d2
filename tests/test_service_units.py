"""The systemd units shipped in bootstrap/ parse, restart a failed node with a growing delay, stop it with SIGTERM
within a minute, and pass `systemd-analyze verify` where systemd is installed (with the real `swarmnode` in
ExecStart, since verify checks that the command exists)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[1] / "bootstrap"
SERVICES = ["swarmnode-bootstrap.service", "swarmnode-join.service", "swarmnode-health.service"]
ALL = [*SERVICES, "swarmnode-health.timer"]
# keys older systemd versions do not know (they warn and keep the fixed RestartSec)
NEWER_KEYS = ("RestartSteps", "RestartMaxDelaySec")


def parse(path: Path) -> dict[str, dict[str, list[str]]]:
    """A unit file as {section: {key: [values]}} (continuation lines joined, comments dropped)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    text = path.read_text().replace("\\\n", " ")
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"{path.name}: not a unit line: {raw!r}"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


@pytest.mark.parametrize("name", ALL)
def test_every_unit_parses(name):
    unit = parse(UNITS / name)
    assert "Unit" in unit and "Description" in unit["Unit"]


def test_the_join_unit_restarts_with_backoff_and_stops_on_sigterm_in_seconds():
    service = parse(UNITS / "swarmnode-join.service")
    unit, svc = service["Unit"], service["Service"]
    assert svc["ExecStart"][0].split()[:2] == ["/usr/local/bin/swarmnode", "join"]
    assert svc["Restart"] == ["on-failure"] and float(svc["RestartSec"][0]) >= 5
    assert int(svc["RestartSteps"][0]) > 0 and float(svc["RestartMaxDelaySec"][0]) > float(svc["RestartSec"][0])
    assert unit["StartLimitIntervalSec"] == ["0"]  # never gives up
    assert svc["KillSignal"] == ["SIGTERM"] and svc["KillMode"] == ["mixed"]
    assert float(svc["TimeoutStopSec"][0]) <= 60
    assert service["Install"]["WantedBy"] == ["multi-user.target"]


def test_the_health_check_treats_idle_and_failing_as_answers():
    svc = parse(UNITS / "swarmnode-health.service")["Service"]
    assert "status --self" in svc["ExecStart"][0] and "--on-alert" in svc["ExecStart"][0]
    assert svc["SuccessExitStatus"] == ["1 2 3"]
    assert parse(UNITS / "swarmnode-health.timer")["Timer"]["OnUnitActiveSec"] == ["5min"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.usefixtures("starts_processes")
def test_systemd_analyze_verify_passes(tmp_path):
    swarmnode = shutil.which("swarmnode")
    if swarmnode is None:
        pytest.skip("no swarmnode command on PATH for ExecStart")
    for name in ALL:
        text = (UNITS / name).read_text().replace("/usr/local/bin/swarmnode", swarmnode)
        (tmp_path / name).write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", *[str(tmp_path / n) for n in ALL]], capture_output=True, text=True, timeout=120
    )
    complaints = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip()
        and not any(f"Unknown key '{k}'" in line or f"Unknown key name '{k}'" in line for k in NEWER_KEYS)
    ]
    assert done.returncode == 0 and not complaints, complaints
