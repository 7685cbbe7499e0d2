"""A run hosted from home, for real, in the NAT lab (bench/benchlib/nat_lab.py): a fresh learner (a new key, version
0) behind a NAT router from its first second, a public bootstrap that relays, one sampler behind another NAT
router (5 Mbit/s uplink) and one behind a double NAT, every node on the tiny-cpu preset's own settings (relaying
on: the preset turns it off for loopback). The samplers fetch the learner's versions through the bootstrap's
relay, version 0 included, and push their groups to it the same way: the learner trains and both samplers load
its newer versions. The sampler behind the double NAT first followed an earlier run under the same run id (its
weight store holds that run's versions 50-53, signed by another key), as a volunteer's machine does when a run
is restarted: it drops them and loads the fresh learner's version 0. A third sampler with relaying off says in one
line that it cannot reach the relayed learner and what to change.
Needs root, iproute2 and iptables (skipped, saying which, elsewhere); opt-in (`--runslow`), run by .ci/run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.local.demo import read_steps
from swarmnode.local.swarm import DemoRun, node_args, prepare_swarm, start_bootstrap, wait_for_line
from swarmnode.swarm.weights import WeightStore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from test_nat_lab import _wait  # noqa: E402

from benchlib.nat_lab import NatLab, missing_for_nat_lab  # noqa: E402

LAB_LACKS = missing_for_nat_lab()
HOME_RUN = ["network.use_relay=true"]  # the tiny-cpu preset as it is, relaying on (it is off for loopback)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(LAB_LACKS is not None, reason=str(LAB_LACKS)),
    pytest.mark.usefixtures("starts_processes"),
]


def _status(lab: NatLab, host, sets: list[str], peers: str) -> dict | None:
    args = [a for s in sets for a in ("--set", s)]
    try:
        done = subprocess.run(
            [
                *lab.prefix(host),
                sys.executable,
                "-m",
                "swarmnode",
                "status",
                "--config",
                "tiny-cpu",
                *args,
                "--json",
                "--initial-peers",
                peers,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        return None  # a status client may fail or time out on a busy machine: asked again
    return json.loads(done.stdout) if done.returncode == 0 else None


def _earlier_run(data_dir: Path, run_id: str) -> None:
    """Leave an earlier run's versions 50-53 (another learner's key) in a node's weight store."""
    store, key = WeightStore(data_dir / "weights", run_id), Identity.generate()
    for version in range(50, 54):
        store.publish(version, {"w": torch.full((8,), float(version))}, key)


@pytest.mark.timeout(1200)  # the preset's 300-step warm start, once per session, and a run through the relay
def test_a_fresh_run_whose_learner_is_behind_a_nat_from_the_start(tmp_path):
    run = DemoRun(tmp_path)
    with NatLab() as lab:
        hosts = {
            "bootstrap": lab.public("boot"),
            "learner": lab.behind_nat("home"),
            "sampler1": lab.behind_nat("s1", mbit=5),
            "sampler2": lab.behind_nat("s2", routers=2),
        }
        run.host = lambda name: hosts[name].ip
        run.prefix = lambda name: lab.prefix(hosts[name])
        try:
            sets = prepare_swarm(tmp_path, "tiny-cpu", HOME_RUN, say=lambda _msg: None)  # a new learner key
            _earlier_run(tmp_path / "sampler2", load_config("tiny-cpu", sets).run_id)
            peers = start_bootstrap(run, "tiny-cpu", sets, lambda _msg: None)
            args = node_args("tiny-cpu", sets, peers)

            def start(name: str, role: str):
                return run.start(
                    name,
                    [
                        *args,
                        "--role",
                        role,
                        "--set",
                        f"data_dir={tmp_path / name}",
                        "--identity-path",
                        str(tmp_path / f"{name}.key"),
                        *run.host_args(name),
                    ],
                )

            learner = start("learner", "learner")
            line = wait_for_line(learner, "reachability:", 300)
            assert line.startswith("not reachable") and "relayed through" in line, line
            assert wait_for_line(learner, "learner ready:", 300) == "version 0 (new)"
            samplers = [start("sampler1", "sampler"), start("sampler2", "sampler")]
            for sampler in samplers:
                line = wait_for_line(sampler, "reachability:", 300)
                assert line.startswith("not reachable") and "relayed through" in line, line
                wait_for_line(sampler, "sampler ready:", 300)

            # the learner trains on groups pushed through the relay; both samplers load its newer versions
            _wait(
                "the relayed learner taking 5 steps",
                lambda: (rows := read_steps(tmp_path / "learner" / STEPS_FILE)) and rows[-1]["step"] >= 5,
                600,
                run,
            )

            def following():
                doc = _status(lab, hosts["bootstrap"], sets, peers)
                found = [p for p in (doc or {}).get("peers", []) if p["role"] == "sampler"]
                ok = len(found) == 2 and all(
                    p["version"] >= 3 and (p["health"].get("groups_acked") or 0) > 0 for p in found
                )
                return doc if ok else None

            doc = _wait("both samplers delivering and loading the learner's versions", following, 600, run)
            reach = {p["role"]: p["reachability"] for p in doc["peers"] if p["role"] != "sampler"}
            assert reach == {"bootstrap": "public", "learner": "relayed"}, doc["peers"]
            assert any(a["kind"] == "learner_relayed" for a in doc["alerts"]), doc["alerts"]
            assert not any(a["kind"] == "sampler_undelivered" for a in doc["alerts"]), doc["alerts"]
            logs = {p.name: p.log.read_text(errors="replace") for p in run.procs}
            assert "dropping versions 50-53 held here" in logs["sampler2"], logs["sampler2"][-3000:]
            assert "did not carry" not in logs["learner"]  # its relay check: the bootstrap's relay carries weights
            assert all("is not held here" not in text and "stopped generating" not in text for text in logs.values())

            # a sampler with relaying off cannot reach the relayed learner: it says so once, with what to change
            hosts["sampler3"] = lab.behind_nat("s3")
            off = run.start(
                "sampler3",
                [
                    *args,
                    "--role",
                    "sampler",
                    "--set",
                    "network.use_relay=false",
                    "--set",
                    f"data_dir={tmp_path / 'sampler3'}",
                    "--identity-path",
                    str(tmp_path / "sampler3.key"),
                    *run.host_args("sampler3"),
                ],
            )
            line = wait_for_line(off, "sampler: learner", 300)
            assert "reached only through a relay" in line and "set network.use_relay=true" in line, line
            assert "groups made" not in off.log.read_text(errors="replace")
        finally:
            run.stop(grace=10, learner_grace=60)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert lab.tag not in listed
