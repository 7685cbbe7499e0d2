"""A flood of relay reservations leaves the honest nodes behind NAT relayed (swarm/relay_guard.py), for real: a NAT
lab (bench/benchlib/nat_lab.py, namespaces `tn…`) with two relaying `swarmnode bootstrap` processes, one flooded
and one calm; three flood hosts, two in one /24 and one in another, each with 10 throwaway keys asking the flooded
bootstrap for a reservation (30 keys, more than its 24 reservations); two honest hosts, each behind its own NAT
router, take reservations on both bootstraps in turn (a fresh key each time), best of the pairs compared.

The guard's iptables rules cap the connections per address (4 here) and per /24 (6): the flood holds at most 10
reservations, and each honest node gets one within 2x the time it takes on the calm bootstrap. The control,
without the guard: p2pd's relay grants the flood's keys up to its total and refuses the honest ones.
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

from swarmnode.local.swarm import DemoRun, wait_for_line

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from benchlib.nat_lab import NatLab, missing_for_nat_lab  # noqa: E402

LAB_LACKS = missing_for_nat_lab()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(LAB_LACKS is not None, reason=str(LAB_LACKS)),
    pytest.mark.usefixtures("starts_processes"),
]

PEER = str(Path(__file__).resolve().parents[1] / "relay_flood_peer.py")
PER_ADDRESS, PER_PREFIX, TOTAL = 4, 6, 24
FLOOD = {"fa": "11.240.1.2", "fb": "11.240.1.3", "fc": "11.241.1.2"}  # fa and fb share a /24
KEYS = 10  # per flood host: 30 > TOTAL
PAIRS = 3
TRY_TIMEOUT = 20.0  # seconds an honest try waits for its reservation
SETS = [
    "run_id=tn-relay",
    "network.use_relay=true",
    f"network.relay_max_reservations={TOTAL}",
    f"network.relay_conns_per_address={PER_ADDRESS}",
    f"network.relay_conns_per_prefix={PER_PREFIX}",
    "network.relay_new_conns_per_minute=30",
]


def _python(lab: NatLab, host, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [*lab.prefix(host), sys.executable, PEER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kw,
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def flood_and_reserve(tmp_path: Path, guarded: bool) -> tuple[dict[str, int], dict[str, list[dict]]]:
    """Both bootstraps (guarded or not), the flood on one, then each honest host's tries on both: (reservations
    each flood host holds, each honest host's tries)."""
    sets = SETS if guarded else [*SETS, "network.relay_conns_per_address=0"]
    run = DemoRun(tmp_path)
    flooders: list[subprocess.Popen] = []
    with NatLab(prefix=os.environ.get("SWARMNODE_LAB_PREFIX", "tn")) as lab:  # parallel labs never clash
        hosts = {
            "bootstrap": lab.public("boot"),
            "calm": lab.public("calm"),
            **{name: lab.public(name, ip=ip) for name, ip in FLOOD.items()},
            "h1": lab.behind_nat("h1"),
            "h2": lab.behind_nat("h2"),
        }
        run.host = lambda name: hosts[name].ip
        run.prefix = lambda name: lab.prefix(hosts[name])
        try:
            config = ["--config", "tiny-cpu", *[a for x in sets for a in ("--set", x)]]
            boots = {
                name: run.start(
                    name, ["bootstrap", *config, *run.host_args(name), "--identity-path", str(tmp_path / f"{name}.key")]
                )
                for name in ("bootstrap", "calm")
            }  # both at once: each checks its relay, slowly under load
            flooded, calm = (wait_for_line(boots[name], "initial-peers:", timeout=300) for name in boots)
            for proc in boots.values():
                wait_for_line(proc, "ready ", 120)
            port = flooded.split("/tcp/")[1].split("/")[0]
            rules = subprocess.run(
                [*lab.prefix(hosts["bootstrap"]), "iptables", "-S", f"SWN-RELAY-{port}"], capture_output=True, text=True
            ).stdout
            assert rules.count("-m connlimit") == (2 if guarded else 0), rules  # the bootstrap guards its port

            for name in FLOOD:
                flooders.append(
                    _python(
                        lab,
                        hosts[name],
                        "hold",
                        "--relay",
                        flooded,
                        "--keys",
                        str(KEYS),
                        "--ready",
                        str(tmp_path / f"{name}.json"),
                    )
                )
            held: dict[str, int] = {}
            deadline = time.monotonic() + 240
            while len(held) < len(FLOOD) and time.monotonic() < deadline:
                for name in FLOOD:
                    if (ready := tmp_path / f"{name}.json").exists() and ready.read_text().strip():
                        held[name] = json.loads(ready.read_text())["reserved"]
                assert all(p.poll() is None for p in flooders), [
                    p.stderr.read()[-2000:] for p in flooders if p.poll() is not None
                ]
                time.sleep(1.0)
            assert len(held) == len(FLOOD), held
            honest = [
                _python(
                    lab,
                    hosts[h],
                    "time",
                    "--relay",
                    calm,
                    "--relay",
                    flooded,
                    "--pairs",
                    str(PAIRS),
                    "--timeout",
                    str(TRY_TIMEOUT),
                )
                for h in ("h1", "h2")
            ]
            tries = {}
            for h, proc in zip(("h1", "h2"), honest):
                out, err = proc.communicate(timeout=PAIRS * 2 * (TRY_TIMEOUT + 60))
                assert proc.returncode == 0, err[-2000:]
                tries[h] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        finally:
            for proc in flooders:
                _stop(proc)
            run.stop()
    return held, tries


def _sides(got: list[dict]) -> tuple[list, list]:
    """(the calm bootstrap's seconds, the flooded one's) of one honest host's tries."""
    return [t["seconds"] for t in got if t["relay"] == 0], [t["seconds"] for t in got if t["relay"] == 1]


@pytest.mark.timeout(1200)
def test_a_reservation_flood_from_several_addresses_leaves_honest_nodes_relayed(tmp_path):
    held, tries = flood_and_reserve(tmp_path, guarded=True)
    # every flood host got in, up to its address's and its prefix's caps
    assert all(n >= 1 for n in held.values()) and held["fc"] <= PER_ADDRESS, held
    assert held["fa"] + held["fb"] <= PER_PREFIX, held
    for h, got in tries.items():
        quiet, loud = _sides(got)
        assert None not in quiet and None not in loud, got  # every honest try got a reservation
        print(
            f"relay flood: {h} reserved in {min(loud):.2f} s flooded, {min(quiet):.2f} s calm (best of "
            f"{len(loud)}; all {loud} and {quiet}); the flood held {held} of {len(FLOOD) * KEYS} keys"
        )
        assert min(loud) <= 2 * min(quiet), got


@pytest.mark.timeout(1200)
def test_without_the_guard_the_flood_takes_every_reservation(tmp_path):
    """The control: p2pd's own limits let the flood's keys take the relay's whole total; the honest are refused."""
    held, tries = flood_and_reserve(tmp_path, guarded=False)
    print(f"relay flood, unguarded: the flood held {held} of {len(FLOOD) * KEYS} keys; honest tries {tries}")
    assert sum(held.values()) > PER_PREFIX + PER_ADDRESS, held
    assert all(None in _sides(got)[1] for got in tries.values()), tries
