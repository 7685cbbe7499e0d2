"""End to end: `swarmnode demo` runs a real local swarm (bootstrap, learner, 2 samplers as subprocesses over
p2pd on 127.0.0.1), the learner trains on stale rollouts without collapsing, and nothing is left running."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from demo_helpers import assert_no_node_left, run_demo

DEMO_KEYS = ("learner_steps", "versions_published", "reward_start", "reward_end", "staleness_max", "rollouts_received")


def assert_climbs(doc: dict) -> None:
    """The reward's fitted line over every step rises by more than CLIMB with a t above TREND_T: comparing the
    first and last 10 % (20 steps each, per-step sd ~0.06) alone was too noisy a judge of 200 steps."""
    trend = (doc["reward_gain"], doc["reward_trend_t"], doc["reward_start"], doc["reward_end"], doc["reward_curve"])
    assert doc["reward_gain"] > CLIMB and doc["reward_trend_t"] > TREND_T, trend


def test_reward_trend_tells_a_rise_from_noise():
    """The fitted line's gain and t: a rise under noise is found, flat noise is not, a fall is negative."""
    import random

    from swarmnode.local.demo import reward_trend

    rng = random.Random(0)
    noise = [rng.gauss(0.0, 0.06) for _ in range(200)]  # the tiny task's per-step sd
    rising = reward_trend([0.36 + 0.06 * i / 199 + e for i, e in enumerate(noise)])
    assert 0.03 < rising["reward_gain"] < 0.09 and rising["reward_trend_t"] > TREND_T, rising
    flat = reward_trend([0.4 + e for e in noise])
    assert abs(flat["reward_gain"]) < CLIMB and abs(flat["reward_trend_t"]) < TREND_T, flat
    falling = reward_trend([0.4 - 0.2 * i / 199 + e for i, e in enumerate(noise)])
    assert falling["reward_gain"] < 0 and falling["reward_trend_t"] < -TREND_T, falling
    assert reward_trend([0.5, 0.6]) == {"reward_gain": None, "reward_trend_t": None}


# Fitted over 200 steps at tiny-cpu's learning rate 3e-4: async, 2 samplers, gain +0.057 and +0.077 (t 5.9, 8.1);
# pull with a sampler restarted +0.060 and +0.052 (t 5.9, 5.6). At 1e-3 a learner fed fresh data (pull, or async on
# a slow machine: CI dropped 9 stale groups, not ~2,500) collapsed its entropy: pull gains +0.02 to +0.08, t 1.5.
CLIMB, TREND_T = 0.015, 2.0
STEPS = 200


@pytest.mark.slow  # CI's long-scenario step runs it (.ci/run); the suite's 10-minute budget
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("starts_processes")
def test_demo_swarm_learns_with_stale_data_and_leaves_no_process(tmp_path):
    doc = run_demo(tmp_path, "--steps", str(STEPS), "--minutes", "6")
    for key in DEMO_KEYS:
        assert key in doc, key
    assert doc["learner_steps"] >= STEPS, doc
    assert doc["versions_published"] >= STEPS * 3 // 4
    assert doc["rollouts_received"] >= 8 * STEPS  # each step trains on 8 groups from the samplers
    assert doc["staleness_max"] >= 1, "async mode: some rollouts must come from older versions"
    # samplers fetch the versions their learner's acks tell at once (measured mean 1.9); following only at each
    # 2 s heartbeat gave 7-8 at these rates, with hundreds of groups dropped as too stale
    assert doc["staleness_mean"] < 5, doc["staleness_mean"]
    hist = doc["staleness_hist"]  # groups trained on, by staleness bucket: stale data really happens
    assert sum(hist.values()) >= 8 * STEPS and sum(1 for c in hist.values() if c) >= 2, hist
    assert all(s["steps"] > STEPS // 4 for s in doc["samplers"].values()), doc["samplers"]
    assert_climbs(doc)
    assert_no_node_left(doc)


@pytest.mark.slow  # ~1 min quiet: CI's long-scenario step runs it (.ci/run)
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("starts_processes")
def test_demo_pull_mode_survives_a_sampler_killed_and_restarted(tmp_path):
    kill_at = 40
    doc = run_demo(
        tmp_path, "--steps", str(STEPS), "--minutes", "6", "--set", "sync.mode=pull", "--kill-sampler-at", str(kill_at)
    )
    assert doc["learner_steps"] >= STEPS and doc["sampler_killed_at_step"] >= kill_at, doc
    restarted = doc["samplers"]["sampler2"]
    assert restarted["last_step"] > doc["sampler_killed_at_step"] + 20, doc["samplers"]  # it came back and served
    # pull: a sampler fetches the newest version before every batch, so rollouts are at most a step or two old
    assert doc["staleness_mean"] < 1.5, doc["staleness_mean"]
    assert_climbs(doc)
    assert_no_node_left(doc)


@pytest.mark.slow  # ~90 s alone; the other two demos keep the swarm covered in the default suite
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("starts_processes")
def test_demo_learns_with_simulated_weight_delay(tmp_path):
    doc = run_demo(
        tmp_path,
        "--steps",
        str(STEPS),
        "--minutes",
        "6",
        "--set",
        "sync.delay_target=weights",
        "--set",
        "sync.simulate_delay=lognormal:1.0,0.5,6",
    )
    assert doc["learner_steps"] >= STEPS, doc
    assert doc["staleness_max"] >= 3, "held-back weights must show up as staler rollouts"
    assert_climbs(doc)
    assert_no_node_left(doc)


@pytest.mark.usefixtures("starts_processes")
def test_stop_waits_for_the_learner_checkpoint_and_kills_a_stuck_sampler(tmp_path):
    """On stop, a learner still writing its checkpoint after the samplers' grace is left to finish; a sampler that
    ignores SIGTERM is killed after its grace."""
    from swarmnode.local.swarm import DemoRun, Proc

    run = DemoRun(tmp_path)
    slow_checkpoint = (
        "import signal, sys, time\n"
        "def done(*_):\n    time.sleep(3); open(sys.argv[1], 'w').write('ok'); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, done)\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    stuck = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    marker = tmp_path / "checkpoint-written"
    for name, code, args in (("learner", slow_checkpoint, [str(marker)]), ("sampler1", stuck, [])):
        popen = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, start_new_session=True)
        assert popen.stdout.readline().strip() == b"up"  # its handler is installed
        run.procs.append(Proc(name, popen, tmp_path / f"{name}.log"))
    try:
        run.stop(grace=0.5, learner_grace=30)
        learner, sampler = (proc.popen for proc in run.procs)
        assert learner.returncode == 0 and marker.read_text() == "ok"
        assert sampler.returncode == -9
    finally:
        for proc in run.procs:
            if proc.popen.poll() is None:
                proc.popen.kill()


@pytest.mark.usefixtures("starts_processes")
def test_demo_nodes_share_the_cores_instead_of_each_taking_them_all(tmp_path, monkeypatch):
    """Each learner and sampler of a local swarm runs torch on its share of the cores (2 samplers and a learner
    each taking every core of a 2-core machine made SmolLM2 generation ~35x slower); an OMP_NUM_THREADS of the
    caller's own wins."""
    from swarmnode.local.swarm import DemoRun, threads_per_node

    cores = len(os.sched_getaffinity(0))
    assert threads_per_node(3) == max(1, cores // 3) and threads_per_node(cores * 4) == 1
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    show = "import os, torch; print(os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())"
    run = DemoRun(tmp_path, threads=1, python_args=lambda _name: ["-c", show])  # `-c` runs before `-m swarmnode`
    for name in ("sampler1", "bootstrap"):
        assert run.start(name, []).popen.wait(timeout=120) == 0
    assert (tmp_path / "sampler1.log").read_text().split() == ["1", "1"]
    assert (tmp_path / "bootstrap.log").read_text().split()[0] == "None"  # no torch work there
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert run.start("sampler2", []).popen.wait(timeout=120) == 0
    assert (tmp_path / "sampler2.log").read_text().split() == ["2", "2"]


@pytest.mark.parametrize("count", ["0", "-1", "9"])
@pytest.mark.usefixtures("starts_processes")
def test_demo_refuses_a_bad_learner_count_in_one_line(count):
    result = subprocess.run(
        [sys.executable, "-m", "swarmnode", "demo", f"--learners={count}"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        f"error: --learners {count}: expected 1 to 8 (each learner is a process on this machine)"
    ]


@pytest.mark.slow  # two learners, two samplers and a bootstrap on 2 shared cores: about a minute
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("starts_processes")
def test_demo_with_two_learners_shows_both_stepping_and_averaging(tmp_path):
    steps = 24
    doc = run_demo(
        tmp_path, "--learners", "2", "--steps", str(steps), "--minutes", "6", "--set", "learner.average_every=4"
    )
    assert doc["stopped"] == "steps", doc["stopped"]
    learners = doc["learners"]
    assert set(learners) == {"learner1", "learner2"}, learners
    for each in learners.values():  # both trained their share, and averaged with the other
        assert each["steps"] >= steps and each["averaging_rounds"] >= 1 and each["version"] >= 1, learners
    assert doc["learner_steps"] == sum(each["steps"] for each in learners.values())
    assert doc["rollouts_received"] >= 8 * doc["learner_steps"]  # each step trains on 8 groups, whoever sent them
    assert all(s["steps"] > 0 for s in doc["samplers"].values()), doc["samplers"]
    assert_no_node_left(doc)
