"""Credit pacing in a real local swarm (bootstrap, one learner, three samplers: real processes over p2pd on
127.0.0.1, the tiny model): samplers that could make over twice what the learner trains on (no generation cap,
batches of 16 prompts, a learner slowed by micro-batches of one row) make what it takes, and at steady state at
most 5 % of the groups that reach it are thrown away (refused as stale, aged out, over quota, evicted)."""

from __future__ import annotations

import re
import time

import pytest

from swarmnode.learner.steps_log import STEPS_FILE
from swarmnode.learner.waste import waste_between
from swarmnode.local.demo import read_steps
from swarmnode.local.swarm import DemoRun, prepare_swarm, start_swarm

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

CONFIG = "tiny-cpu"
SAMPLERS = 3
# Without pacing (`sync.pacing=outbox`) these samplers deliver 2.1 groups per group the learner draws while
# waiting 58 % of their time on full outboxes, and 52 % of what arrives is dropped (bench/sampler-pacing).
FAST_SAMPLERS = [
    "sampler.max_groups_per_second=0",
    "sampler.prompts_per_batch=16",
    "learner.max_tokens_per_microbatch=8",
]
WARMUP, STEPS = 20, 80  # the window: 60 steps x 8 groups drawn, after the start's transient
MAX_WASTE = 0.05


@pytest.mark.slow  # ~40 s quiet: CI's long-scenario step runs it (.ci/run)
@pytest.mark.timeout(900)
def test_paced_samplers_twice_as_fast_as_the_learner_waste_at_most_five_percent(tmp_path, swarmnode_home):
    sets = prepare_swarm(tmp_path, CONFIG, [*FAST_SAMPLERS, "sync.pacing=credits"], say=lambda _msg: None)
    run = DemoRun(tmp_path)
    steps_file = tmp_path / "learner" / STEPS_FILE
    try:
        start_swarm(run, CONFIG, sets, say=lambda _msg: None, samplers=SAMPLERS)
        deadline = time.monotonic() + 720
        while not (rows := read_steps(steps_file)) or rows[-1]["step"] < STEPS:
            assert time.monotonic() < deadline, f"the learner took {rows[-1]['step'] if rows else 0} steps in 12 min"
            run.check_alive()
            time.sleep(1.0)
    finally:
        run.stop()
    rows = read_steps(steps_file)
    first = next(r for r in rows if r["step"] >= WARMUP)
    steady = waste_between(first, rows[-1])
    # the window saw real traffic: 8 groups drawn per step, give or take what the buffer held at its ends
    assert steady["arrived"] >= 8 * (STEPS - WARMUP) - 64, steady
    assert steady["waste"] <= MAX_WASTE, (steady, rows[-1]["buffer_counters"])
    logs = [(tmp_path / f"sampler{i}.log").read_text(errors="replace") for i in range(1, SAMPLERS + 1)]
    waited = [float(m) for log in logs for m in re.findall(r"([\d.]+) s of [\d.]+ s waiting for credit", log)]
    assert sum(waited) > 0, "the samplers never waited for credit: they were not faster than the learner"
