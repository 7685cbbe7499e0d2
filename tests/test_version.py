"""The version means something: `swarmnode --version` prints the package's version (from the git tags at build),
peers advertise it in their record's `software` field, and `status` shows a node that runs another build."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swarmnode import __version__
from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.observe.status import format_status, status_document
from swarmnode.observe.status_schema import validate
from swarmnode.protocol.peer import PeerRecord, software_build


@pytest.mark.usefixtures("starts_processes")
def test_version_option_prints_the_package_version():
    out = subprocess.run(
        [sys.executable, "-m", "swarmnode", "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == f"swarmnode {__version__}"
    assert __version__ and __version__ != "0+unknown"


def test_software_build_reads_the_build_from_the_software_field():
    assert software_build("swarmnode/0.2.0 card/3") == "0.2.0"
    assert software_build("swarmnode/0.2.1.dev4+gabc1234") == "0.2.1.dev4+gabc1234"
    assert software_build("") == software_build("otherclient/1.0") == software_build("swarmnode/") == "unknown"


def _record(role: str, software: str, version: int = 3) -> PeerRecord:
    record = PeerRecord.create(Identity.generate(), role=role, version=version, versions=[version], software=software)
    return PeerRecord.decode(record.encode())


def test_status_shows_a_node_of_another_build():
    cfg = load_config("tiny-cpu", ["run_id=builds-run"])
    old = _record("sampler", "swarmnode/0.1.0 card/2")
    records = [_record("learner", "swarmnode/0.2.0"), _record("sampler", "swarmnode/0.2.0 card/2"), old]
    doc = json.loads(json.dumps(status_document(cfg, records, now=records[0].timestamp)))
    validate(doc, builtin=True)
    validate(doc)
    assert doc["builds"] == {"0.2.0": 2, "0.1.0": 1}
    text = format_status(doc)
    assert f"mixed builds: 0.2.0 2, 0.1.0 1 ({old.peer_id} runs 0.1.0)" in text.splitlines()

    same = status_document(cfg, records[:2], now=records[0].timestamp)
    assert same["builds"] == {"0.2.0": 2} and "mixed builds" not in format_status(same)
