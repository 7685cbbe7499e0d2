"""Volunteers behind NAT routers, for real: network namespaces on this machine (bench/benchlib/nat_lab.py) with an
"internet" holding the bootstrap and a public learner, one sampler behind a NAT router with a 5 Mbit/s uplink and
one behind a double NAT; real `swarmnode` processes and p2pd. The run trains on both samplers' groups, both load
new versions, `status` tells each node's reachability; then the learner moves behind a NAT and the run goes on
training through the bootstrap's relay; a learner behind a NAT with relaying off is refused before `ready`. In
SAPO mode, a node behind a NAT with no relay (client-only) pulls its peers' text and one behind a double NAT gets
it pushed through the relay: both train on a public node's groups, and it on theirs. A public and a relayed
learner average their parameters to identical weights.
Needs root, iproute2 and iptables (skipped, saying which, elsewhere); opt-in (`--runslow`), run by .ci/run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.local.demo import read_steps
from swarmnode.local.swarm import DemoRun, node_args, prepare_swarm, start_bootstrap, wait_for_line

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from benchlib.nat_lab import NatLab, missing_for_nat_lab  # noqa: E402

LAB_LACKS = missing_for_nat_lab()
FAST = [
    "model.tiny.warm_start_steps=0",
    "sampler.prompts_per_batch=4",
    "learner.prompts_per_step=4",
    "sampler.max_completion_length=6",
    "learner.publish_every=1",
    "sampler.max_groups_per_second=0",
    "network.use_relay=true",
]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(LAB_LACKS is not None, reason=str(LAB_LACKS)),
    pytest.mark.usefixtures("starts_processes"),
]


def _status(lab: NatLab, host, run: DemoRun, sets: list[str], peers: str) -> dict:
    args = [a for s in sets for a in ("--set", s)]
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
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _wait(what: str, check, timeout: float, run: DemoRun):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.check_alive()
        result = check()
        if result:
            return result
        time.sleep(1.0)
    raise AssertionError(
        f"{what} did not happen within {timeout:.0f} s:\n" + "\n".join(f"--- {p.name}\n{p.tail(12)}" for p in run.procs)
    )


def _stop(run: DemoRun, name: str, grace: float) -> None:
    proc = next(p for p in run.procs if p.name == name)
    proc.popen.send_signal(signal.SIGTERM)
    try:
        proc.popen.wait(grace)
    except subprocess.TimeoutExpired:
        proc.popen.kill()
        proc.popen.wait(10)
    run.procs.remove(proc)


def _samplers_status(doc: dict) -> dict[str, dict]:
    return {p["peer_id"]: p for p in doc["peers"] if p["role"] == "sampler"}


def test_a_run_trains_across_nat_routers_and_through_the_bootstraps_relay(tmp_path):
    run = DemoRun(tmp_path)
    with NatLab() as lab:
        hosts = {
            "bootstrap": lab.public("boot"),
            "learner": lab.public("learner"),
            "sampler1": lab.behind_nat("s1", mbit=5),
            "sampler2": lab.behind_nat("s2", routers=2),
        }
        run.host = lambda name: hosts[name].ip
        run.prefix = lambda name: lab.prefix(hosts[name])
        try:
            sets = prepare_swarm(tmp_path, "tiny-cpu", FAST, say=lambda _msg: None)
            peers = start_bootstrap(run, "tiny-cpu", sets, lambda _msg: None)
            args = node_args("tiny-cpu", sets, peers)

            def start(name: str, role: str, *extra: str):
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
                        *extra,
                    ],
                )

            learner = start("learner", "learner")
            assert wait_for_line(learner, "reachability:", 90).startswith(f"public at /ip4/{hosts['learner'].ip}/")
            wait_for_line(learner, "learner ready:", 120)
            samplers = [start("sampler1", "sampler"), start("sampler2", "sampler")]
            for sampler in samplers:
                line = wait_for_line(sampler, "reachability:", 90)
                assert line.startswith("not reachable") and "relayed through" in line, line
                assert "forward TCP port" in line, line
                wait_for_line(sampler, "ready ", 180)

            # both samplers' groups reach the learner; both load new versions; status says who is reachable how
            def delivered_and_following():
                doc = _status(lab, hosts["bootstrap"], run, sets, peers)
                found = _samplers_status(doc)
                ok = len(found) == 2 and all(
                    (p["health"].get("groups_acked") or 0) > 0 and p["version"] >= 1 for p in found.values()
                )
                return doc if ok else None

            doc = _wait("both samplers delivering and following", delivered_and_following, 180, run)
            reach = {p["role"]: p["reachability"] for p in doc["peers"]}
            assert reach["learner"] == "public" and reach["bootstrap"] == "public", doc["peers"]
            assert all(p["reachability"] == "relayed" for p in _samplers_status(doc).values()), doc["peers"]
            assert doc["reachability"]["relayed"] == 2
            before = read_steps(tmp_path / "learner" / STEPS_FILE)[-1]["groups_received"]
            learner_version = next(p["version"] for p in doc["peers"] if p["role"] == "learner")

            # the learner moves behind a NAT: samplers reach it through the bootstrap's relay, it keeps training
            _stop(run, "learner", grace=120)
            hosts["learner"] = lab.behind_nat("learner-home")
            learner = start("learner", "learner")
            line = wait_for_line(learner, "reachability:", 90)
            assert "relayed through" in line, line
            wait_for_line(learner, "learner ready:", 120)
            _wait(
                "the relayed learner receiving groups",
                lambda: (
                    (rows := read_steps(tmp_path / "learner" / STEPS_FILE))
                    and rows[-1]["groups_received"] >= before + 8
                ),
                180,
                run,
            )

            def following_through_the_relay():  # versions made behind the NAT reach both samplers
                doc = _status(lab, hosts["bootstrap"], run, sets, peers)
                found = _samplers_status(doc)
                return (
                    doc if len(found) == 2 and all(p["version"] > learner_version + 1 for p in found.values()) else None
                )

            doc = _wait("both samplers loading the relayed learner's versions", following_through_the_relay, 180, run)
            assert {p["reachability"] for p in doc["peers"] if p["role"] == "learner"} == {"relayed"}
            assert any(a["kind"] == "learner_relayed" for a in doc["alerts"]), doc["alerts"]

            # with relaying off, a learner behind a NAT is refused before `ready`, with the advice
            hosts["learner2"] = lab.behind_nat("learner2-home")
            refused = start("learner2", "learner", "--set", "network.use_relay=false")
            assert refused.popen.wait(120) != 0
            out = refused.log.read_text()
            assert "ready " not in out and "cannot be a learner" in out and "forward TCP port" in out, out[-2000:]
            run.procs.remove(refused)
        finally:
            run.stop(grace=10, learner_grace=60)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert lab.tag not in listed


SAPO = [
    "mode=sapo",
    "sapo.local_groups=2",
    "sapo.external_groups=4",
    "sapo.max_groups_per_peer=2",
    "sapo.external_wait=2",
    "sampler.max_groups_per_second=4",
]


def _external_senders(path: Path) -> set[str]:
    if not path.exists():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {peer for row in rows for peer in row.get("step_external_peers", {})}


def test_sapo_nodes_behind_nat_train_on_their_peers_text(tmp_path):
    run = DemoRun(tmp_path)
    with NatLab() as lab:
        hosts = {
            "bootstrap": lab.public("boot"),
            "public": lab.public("a"),
            "client": lab.behind_nat("b"),
            "relayed": lab.behind_nat("c", routers=2),
        }
        run.host = lambda name: hosts[name].ip
        run.prefix = lambda name: lab.prefix(hosts[name])
        try:
            sets = prepare_swarm(tmp_path, "tiny-cpu", [*FAST, *SAPO], say=lambda _msg: None)
            peers = start_bootstrap(run, "tiny-cpu", sets, lambda _msg: None)
            args = node_args("tiny-cpu", sets, peers)
            extra = {"client": ["--set", "network.use_relay=false"]}
            nodes = {
                name: run.start(
                    name,
                    [
                        *args,
                        "--set",
                        f"data_dir={tmp_path / name}",
                        "--identity-path",
                        str(tmp_path / f"{name}.key"),
                        *run.host_args(name),
                        *extra.get(name, []),
                    ],
                )
                for name in ("public", "client", "relayed")
            }
            lines = {name: wait_for_line(proc, "reachability:", 90) for name, proc in nodes.items()}
            assert lines["public"].startswith("public at"), lines
            assert lines["client"].startswith("not reachable and no relay"), lines
            assert "relayed through" in lines["relayed"], lines
            ids = {name: wait_for_line(proc, "ready peer_id=", 120).split()[0] for name, proc in nodes.items()}
            wait_for_line(nodes["client"], "sapo: peers cannot dial this node", 120)

            # the public node gets both NATed nodes' text (they push over their own connections); the client-only
            # one pulls the public node's; the relayed one gets it pushed through the bootstrap's relay
            wanted = {"public": {ids["client"], ids["relayed"]}, "client": {ids["public"]}, "relayed": {ids["public"]}}
            _wait(
                "every SAPO node training on the text it can get",
                lambda: all(
                    want <= _external_senders(tmp_path / name / "sapo_steps.jsonl") for name, want in wanted.items()
                ),
                300,
                run,
            )
            doc = _status(lab, hosts["bootstrap"], run, sets, peers)
            reach = {p["peer_id"]: p["reachability"] for p in doc["peers"]}
            assert [reach.get(ids[n]) for n in ("public", "client", "relayed")] == [
                "public",
                "client-only",
                "relayed",
            ], doc["peers"]
        finally:
            run.stop(grace=20, learner_grace=20)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert lab.tag not in listed


def test_a_relayed_learner_averages_with_a_public_one(tmp_path):
    run = DemoRun(tmp_path)
    script = str(Path(__file__).resolve().parents[1] / "averaging_peer.py")
    procs: list[subprocess.Popen] = []
    outs = {}
    with NatLab() as lab:
        hosts = {"bootstrap": lab.public("boot"), "public": lab.public("a"), "relayed": lab.behind_nat("b")}
        run.host = lambda name: hosts[name].ip
        run.prefix = lambda name: lab.prefix(hosts[name])
        try:
            peers = start_bootstrap(run, "tiny-cpu", ["run_id=nat-avg", "network.use_relay=true"], lambda _msg: None)
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
                ),
            }
            for seed, name in enumerate(("public", "relayed")):
                outs[name] = (tmp_path / f"{name}.out").open("w+")
                procs.append(
                    subprocess.Popen(
                        [
                            *lab.prefix(hosts[name]),
                            sys.executable,
                            script,
                            "--initial-peers",
                            peers,
                            "--host",
                            hosts[name].ip,
                            "--seed",
                            str(seed),
                            "--version",
                            str(3 + 4 * seed),
                        ],
                        stdout=outs[name],
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                )
            for proc in procs:
                proc.wait(timeout=400)
            found = {}
            for name, out in outs.items():
                out.seek(0)
                text = out.read()
                lines = [line for line in text.splitlines() if line.startswith("{")]
                assert lines, f"{name} printed no result:\n{text[-3000:]}"
                found[name] = json.loads(lines[-1])
            assert [found[n]["reachability"] for n in ("public", "relayed")] == ["public", "relayed"], found
            last = {name: doc["rounds"][-1] for name, doc in found.items()}
            assert all(r["version"] == 8 and r["group_size"] == 2 for r in last.values()), found  # max(3, 7) + 1
            assert found["public"]["params"] == found["relayed"]["params"], found  # identical weights at both
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
            for out in outs.values():
                out.close()
            run.stop(grace=10, learner_grace=10)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert lab.tag not in listed
