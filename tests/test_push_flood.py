"""A door strangers cannot hold (issue #57): a bootstrap, a learner and an honest sampler as processes on
127.0.0.1 (tiny-cpu), then 80 throwaway keys (tests/push_flood_peer.py, one real p2pd each) each pushing one validly
signed group claiming a version the learner never made every 4 s. The learner's steps per second under the flood
are compared, in the same run, with its calm pace before and after: the keys on probation share a bounded part
of the room behind the established sampler, and each refused push is a strike (three: banned)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from restart_helpers import WORK, learner_args, steps, wait_rows
from swarm_helpers import LocalSwarm
from test_slot_flood import stop_flood

from swarmnode.config import load_config

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

KEYS, EVERY, WINDOW_S = 80, 4.0, 12.0
MIN_RATIO = 0.8


def pace(path: Path, seconds: float) -> float:
    """The learner's steps per second over the next `seconds`."""
    begin = len(steps(path))
    time.sleep(seconds)
    return (len(steps(path)) - begin) / seconds


def start_flood(tmp_path: Path, target: str, run_id: str) -> tuple[subprocess.Popen, Path]:
    cfg = load_config("tiny-cpu")
    ready = tmp_path / "flood.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("push_flood_peer.py")),
            *("--target", target, "--run", run_id, "--keys", str(KEYS), "--every", str(EVERY)),
            *("--ready", str(ready), "--generations", str(cfg.sampler.num_generations)),
            *("--temperature", str(cfg.sampler.temperature), "--prompt-id", "add:6:6"),
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return proc, ready


def wait_flood(proc: subprocess.Popen, ready: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not ready.exists() or not ready.read_text().strip():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        assert time.monotonic() < deadline, "the flood's daemons did not start"
        time.sleep(0.5)


@pytest.mark.slow  # a bootstrap, a learner, a sampler and 80 daemons: ~1.5 min on 2 cores
@pytest.mark.timeout(900)
def test_a_throwaway_key_flood_leaves_the_learner_at_its_calm_pace(tmp_path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        learner = swarm.join("learner", "learner", wait=False, **learner_args(tmp_path))
        learner_id = learner.ready_fields(timeout=300)["peer_id"]
        sampler = swarm.join(
            "sampler", "sampler", work=True, wait=False, extra=[*WORK, "--set", f"data_dir={tmp_path / 'sampler'}"]
        )
        sampler.ready_fields(timeout=300)
        wait_rows(steps_file, lambda rows: len(rows) >= 20, 240, "20 learner steps")  # the sampler is established
        addr = next(p for p in swarm.status()["peers"] if p["peer_id"] == learner_id)["addrs"][0]
        calm = pace(steps_file, WINDOW_S)
        proc, ready = start_flood(tmp_path, f"{addr}/p2p/{learner_id}", swarm.run_id)
        try:
            wait_flood(proc, ready)  # every key has pushed once
            flooded = pace(steps_file, WINDOW_S)
        finally:
            stop_flood(proc)
        after = pace(steps_file, WINDOW_S)
        out = learner.stdout()
    lines = ready.read_text().splitlines()
    final = json.loads(lines[-1]) if lines else {}
    print(f"calm {calm:.2f}, flooded {flooded:.2f}, after {after:.2f} steps/s; flood acks {final}")
    # the flood reached the learner: each key was refused, told the room is full (its bounded share is taken), or
    # banned after three refused pushes (strikes); under load most keys only ever hear "full"
    assert sum(final.get(k, 0) for k in ("future", "full", "banned")) >= KEYS, final
    assert final.get("future", 0) + final.get("banned", 0) > 0, final  # pushes past the door were refused
    assert "caught sampler" not in out
    assert flooded >= MIN_RATIO * (calm + after) / 2, (calm, flooded, after)
