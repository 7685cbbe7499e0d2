"""A swarm of separate machines on this one (bench/swarm-speedup/swarm_value.py's `<arm>-netns` arms): every node in its own
network namespace with its own address and a capped upload (bench/benchlib/netns_hosts.py), started through the demo's own
`DemoRun` with a per-node address. The scenario needs root and iproute2."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.local.demo import read_steps
from swarmnode.local.swarm import (
    DemoRun,
    node_args,
    prepare_swarm,
    start_bootstrap,
    start_learners,
    start_samplers,
    wait_for_line,
)

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "bench" / d) for d in ("swarm-speedup", ".")]

from swarm_value import namespaced  # noqa: E402

from benchlib.netns_hosts import in_namespace, limited_hosts, missing_for_namespaces  # noqa: E402

NAMESPACES_LACK = missing_for_namespaces()  # None where namespaced hosts can be made (one is made and removed)
FAST = [
    "model.tiny.warm_start_steps=0",
    "sampler.prompts_per_batch=4",
    "learner.prompts_per_step=4",
    "sampler.max_completion_length=6",
    "learner.publish_every=1",
    "sampler.max_groups_per_second=0",
]


def test_only_swarm_arms_named_netns_run_in_namespaces():
    assert namespaced("warm-pull-netns") and namespaced("swarm-netns")
    assert not namespaced("warm-pull") and not namespaced("local-netns") and not namespaced("swarm-netns-x")


def test_a_node_gets_its_own_listen_address_only_when_it_has_one(tmp_path):
    run = DemoRun(tmp_path)
    assert run.host_args("learner") == []  # the config's network.host_maddrs
    assert run.host_args("bootstrap", "127.0.0.1") == ["--host-maddrs", "/ip4/127.0.0.1/tcp/0"]
    run.host = {"learner": "10.231.77.3"}.get
    assert run.host_args("learner") == ["--host-maddrs", "/ip4/10.231.77.3/tcp/0"]
    assert run.host_args("bootstrap", "127.0.0.1") == ["--host-maddrs", "/ip4/127.0.0.1/tcp/0"]


def test_what_namespaces_lack_is_named(monkeypatch):
    monkeypatch.setenv("PATH", "")
    why = missing_for_namespaces()
    assert "root" in why or "iproute2 (ip, tc not found)" in why


@pytest.mark.usefixtures("starts_processes")
def test_a_host_that_cannot_be_made_is_named_and_leaves_nothing(tmp_path, monkeypatch):
    if NAMESPACES_LACK is not None:
        pytest.skip(NAMESPACES_LACK)
    fake = tmp_path / "tc"  # a kernel without tbf, say
    fake.write_text("#!/bin/sh\necho 'RTNETLINK answers: No such file or directory' >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    why = missing_for_namespaces()
    assert why.startswith("cannot make namespaced hosts here (ip netns exec") and "tc qdisc add" in why
    assert "RTNETLINK answers" in why
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "swnb" not in listed


@pytest.mark.slow  # CI: .ci/run
@pytest.mark.skipif(NAMESPACES_LACK is not None, reason=str(NAMESPACES_LACK))
@pytest.mark.usefixtures("starts_processes")
def test_a_learner_trains_on_groups_that_crossed_capped_links_and_the_namespaces_go(tmp_path):
    run = DemoRun(tmp_path)
    names = ["bootstrap", "learner", "sampler1"]
    with limited_hosts(len(names), 8) as made:
        hosts = dict(zip(names, made))
        run.host = lambda name: hosts[name][1]
        run.prefix = lambda name: in_namespace(hosts[name][0])
        try:
            sets = prepare_swarm(tmp_path, "tiny-cpu", FAST, say=lambda _msg: None)
            peers = start_bootstrap(run, "tiny-cpu", sets, lambda _msg: None)
            assert f"/ip4/{hosts['bootstrap'][1]}/" in peers  # reachable from the other namespaces
            args = node_args("tiny-cpu", sets, peers)
            start_samplers(run, args, 1)
            start_learners(run, args)
            learner = next(p for p in run.procs if p.name == "learner")
            wait_for_line(learner, "learner ready:", 120)
            deadline, rows = time.monotonic() + 120, []
            while time.monotonic() < deadline and not (rows and rows[-1]["groups_received"] >= 3 * 4):
                run.check_alive()
                rows = read_steps(tmp_path / "learner" / STEPS_FILE)
                time.sleep(0.5)
            assert rows and rows[-1]["groups_received"] >= 3 * 4, learner.tail(30)
        finally:
            run.stop(grace=10, learner_grace=60)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns, _ in made)


@pytest.mark.usefixtures("starts_processes")
def test_a_bad_upload_cap_is_refused_before_anything_runs():
    bench = Path(__file__).resolve().parents[2] / "bench" / "swarm-speedup" / "swarm_value.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--arms", "local", "--netns-mbit", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--netns-mbit 0.0: expected a positive upload limit" in done.stderr
