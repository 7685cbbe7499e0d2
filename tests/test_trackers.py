"""Trackers (`swarmnode.trackers`): a real learner's step figures (the tiny model, a few steps, in process) go
through `TrackerHub` to trackio, wandb (offline) and tensorboard, and each tracker's own reader finds TRL's
`reward` and `kl` at the learner's steps; a tracker that fails is said once and training goes on; a stuck
tracker never blocks a report. The role wiring runs in tests/test_trackers_node.py."""

from __future__ import annotations

import os
import tempfile
import threading
import uuid

import pytest
import torch

os.environ.setdefault("TRACKIO_DIR", tempfile.mkdtemp(prefix="trackio-"))  # never the user's store
os.environ.setdefault("WANDB_SILENT", "true")

from test_own_sampling import FAST as OWN_FAST  # noqa: E402
from tracker_readers import tensorboard_scalars, trackio_scalars, wandb_scalars  # noqa: E402

from swarmnode.config import load_config  # noqa: E402
from swarmnode.errors import ExitCode, MissingError  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.learner.buffer import ReplayBuffer, RolloutInbox  # noqa: E402
from swarmnode.learner.loop import LearnerLoop  # noqa: E402
from swarmnode.model.models import load_model, load_tokenizer  # noqa: E402
from swarmnode.node.roles.own_sampling import OwnSampler  # noqa: E402
from swarmnode.tasks import build_task  # noqa: E402
from swarmnode.trackers import TrackerHub, check_trackers, open_trackers  # noqa: E402
from swarmnode.trackers.build import tracked_run  # noqa: E402
from swarmnode.trackers.names import StepMetrics  # noqa: E402

torch.set_num_threads(1)
FAST = [*OWN_FAST, "learner.beta=0.04"]  # beta: TRL's kl, the KL to the reference model


class Learner:
    """A real learner on the tiny model, fed on-policy groups by its own sampler (as `sample_when_idle`)."""

    def __init__(self, overrides: list[str]) -> None:
        self.cfg = cfg = load_config("tiny-cpu", [*FAST, *overrides])
        task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
        me = Identity.generate()
        buffer = ReplayBuffer.from_config(cfg, lineage=me.peer_id)
        self.loop = LearnerLoop(load_model(cfg.model, cfg.task, torch.device("cpu")), tokenizer, task, cfg, buffer)
        self.own = OwnSampler(self.loop, task, cfg, me, RolloutInbox(buffer).send)

    def steps(self, n: int):
        """Yield the diagnostics of the next `n` trained steps."""
        done = 0
        for _ in range(20 * n):
            if done == n:
                return
            diag = self.loop.step()
            if diag is None:
                self.own.batch()
            elif diag.get("trained"):
                done += 1
                yield diag
        raise AssertionError(f"{done} of {n} steps trained")


@pytest.fixture(scope="module")
def learner():
    return Learner([])


def _train_into(learner: Learner, hub: TrackerHub, n: int = 3) -> dict[int, dict]:
    """Train `n` steps reporting each to `hub` (closed after); {step: diagnostics}."""
    metrics = StepMetrics("learner", learner.cfg.sampler.num_generations)
    seen = {}
    for diag in learner.steps(n):
        report = metrics.step(diag)
        assert report is not None
        hub.report(report, int(diag["step"]))
        seen[int(diag["step"])] = diag
    hub.close(timeout=120)
    return seen


def _assert_found(scalars: dict[str, dict[int, float]], seen: dict[int, dict]) -> None:
    for step, diag in seen.items():
        assert scalars["reward"][step] == pytest.approx(diag["reward_mean"], rel=1e-5, abs=1e-6)
        assert scalars["kl"][step] == pytest.approx(diag["ref_kl"], rel=1e-5, abs=1e-7)
        assert scalars["swarm/sampler_kl"][step] == pytest.approx(diag["kl"], rel=1e-5, abs=1e-7)
        assert "completions/mean_length" in scalars and "frac_reward_zero_std" in scalars
    assert sorted(scalars["reward"]) == sorted(seen)


def _hub(learner: Learner, tmp_path, name: str, lines: list[str]):
    cfg = learner.cfg.model_copy(deep=True)
    cfg.metrics.report_to = [name]
    cfg.metrics.logging_dir = str(tmp_path)
    cfg.metrics.project = f"test-{uuid.uuid4().hex[:8]}"
    hub = open_trackers(cfg, tmp_path, "learner", "12D3KooWtestpeer00000001", lines.append)
    assert hub is not None
    return cfg, hub


RUN = "learner-00000001"  # the run name of peer ...00000001
READERS = {  # each tracker's own reader: {name: {step: value}}
    "tensorboard": lambda cfg, where: tensorboard_scalars(where / "tensorboard" / RUN),
    "trackio": lambda cfg, where: trackio_scalars(cfg.metrics.project, RUN),
    "wandb": lambda cfg, where: wandb_scalars(next((where / "wandb").glob("offline-run-*"))),
}


@pytest.mark.parametrize("name", sorted(READERS))
@pytest.mark.usefixtures("starts_processes")  # wandb starts its service process (wandb-core), and git
def test_each_trackers_own_reader_finds_the_learners_reward_and_kl(name, learner, tmp_path, monkeypatch):
    pytest.importorskip(name)
    monkeypatch.delenv("WANDB_MODE", raising=False)  # wandb: offline unless the environment says otherwise
    lines: list[str] = []
    cfg, hub = _hub(learner, tmp_path, name, lines)
    seen = _train_into(learner, hub)
    assert not hub.failed, lines
    _assert_found(READERS[name](cfg, tmp_path), seen)


class _Raises:
    """A tracker whose second report raises (as a tracker whose server went away)."""

    name = "flaky"

    def __init__(self) -> None:
        self.calls = 0

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("connection lost")

    def close(self) -> None:
        pass


def test_a_tracker_that_fails_is_said_once_and_training_goes_on(learner, tmp_path):
    pytest.importorskip("tensorboard")
    from swarmnode.trackers.tensorboard_tracker import TensorboardTracker

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    run = tracked_run(learner.cfg, tmp_path, "learner", "12D3KooWtestpeer00000002")
    broken_run = type(run)(run.project, run.name, blocked / "sub", run.config)
    flaky = _Raises()
    lines: list[str] = []
    hub = TrackerHub(
        [
            ("tensorboard", lambda: TensorboardTracker(broken_run)),  # its folder cannot be made: fails on open
            ("flaky", lambda: flaky),
            ("tensorboard", lambda: TensorboardTracker(run)),
        ],
        lines.append,
    )
    seen = _train_into(learner, hub, n=4)
    assert len(seen) == 4  # every step trained
    assert sorted(hub.failed) == ["flaky", "tensorboard"] and len(lines) == 2, lines
    assert any("tensorboard failed" in line for line in lines) and any("connection lost" in line for line in lines)
    assert flaky.calls == 2  # left out after it raised
    scalars = tensorboard_scalars(tmp_path / "trackers" / "tensorboard" / run.name)
    assert sorted(scalars["reward"]) == sorted(seen)  # the working tracker got every step


def test_a_stuck_tracker_never_blocks_a_report():
    release = threading.Event()

    class Stuck:
        name = "stuck"

        def log(self, metrics: dict[str, float], step: int) -> None:
            release.wait()

        def close(self) -> None:
            pass

    hub = TrackerHub([("stuck", Stuck)], lambda line: None, max_queue=2)
    for step in range(10):
        hub.report({"reward": 0.5, "note": "text", "nan": float("nan")}, step)  # returns at once, every time
    assert hub.dropped >= 7
    release.set()
    hub.close()
    assert hub.logged + hub.dropped == 10


def test_a_named_tracker_whose_package_is_missing_is_one_line_before_ready(monkeypatch):
    from swarmnode.trackers import base

    cfg = load_config("tiny-cpu", ["metrics.report_to=[tensorboard, wandb]"])
    assert cfg.metrics.report_to == ["tensorboard", "wandb"]
    for name in ("tensorboard", "wandb"):
        monkeypatch.setitem(base.PACKAGES, name, "json")  # a package every Python has: the check passes
    check_trackers(cfg.metrics)
    monkeypatch.setitem(base.PACKAGES, "wandb", "wandb_not_installed_here")
    with pytest.raises(MissingError) as err:
        check_trackers(cfg.metrics)
    assert err.value.exit_code == ExitCode.MISSING
    assert "metrics.report_to=wandb" in str(err.value) and "\n" not in str(err.value)
    assert load_config("tiny-cpu", ["metrics.report_to=none"]).metrics.report_to == []


def test_a_sapo_nodes_steps_reach_tensorboard_with_trls_names_and_its_own(learner, tmp_path):
    """A SAPO node's policy (in process: local groups only, on the learner's model) through the names a SAPO node
    reports."""
    pytest.importorskip("tensorboard")
    from swarmnode.node.sapo.policy import SapoPolicy
    from swarmnode.trackers.tensorboard_tracker import TensorboardTracker

    cfg = load_config("tiny-cpu", [*OWN_FAST, "sapo.local_groups=4", "sapo.external_groups=0"])
    policy = SapoPolicy(cfg, Identity.generate(), seed=0, model=learner.loop.model, tokenizer=learner.loop.tokenizer)
    run = tracked_run(cfg, tmp_path, "sapo", "12D3KooWtestpeer00000003")
    hub = TrackerHub([("tensorboard", lambda: TensorboardTracker(run))], lambda line: None)
    metrics, seen = StepMetrics("sapo", cfg.sampler.num_generations), {}
    for _ in range(30):
        policy.generate()
        diag = policy.train_step()
        if diag is not None and diag.get("trained"):
            record = {**diag, "step": policy.learner.step_count, "version": policy.learner.version}
            report = metrics.step(record)
            assert report is not None and not any(k.startswith("swarm/") for k in report)
            hub.report(report, record["step"])
            seen[record["step"]] = record
        if len(seen) == 2:
            break
    hub.close(timeout=60)
    scalars = tensorboard_scalars(tmp_path / "trackers" / "tensorboard" / "sapo-00000003")
    assert sorted(scalars["reward"]) == sorted(seen)
    for step, record in seen.items():
        assert scalars["reward"][step] == pytest.approx(record["reward_mean"], abs=1e-6)
        assert scalars["sapo/own_reward"][step] == pytest.approx(record["own_reward"], abs=1e-6)
    assert "sapo/tokens_per_s" in scalars and "completions/mean_length" in scalars


def test_held_out_scoring_runs_on_a_copy_beside_training(learner):
    """`HeldOutEval` (what a learner node runs with `learner.eval_every`): the copy scores the version it was
    taken at exactly as `evaluate` scores those weights, the learner steps on while it runs, and the figures land
    once each (the steps file's next record) and in the health fields."""
    import asyncio

    from swarmnode.compute_thread import ComputeThread
    from swarmnode.local.evaluation import evaluate
    from swarmnode.node.held_out import HeldOutEval

    cfg = learner.cfg.model_copy(deep=True)
    cfg.learner.eval_every, cfg.learner.eval_samples = 2, 2
    loop, sc = learner.loop, cfg.sampler
    direct = evaluate(
        loop.model,
        loop.tokenizer,
        loop.task,
        samples=2,
        temperature=sc.temperature,
        max_new_tokens=sc.max_completion_length,
        max_prompt_tokens=sc.max_prompt_length,
        seed=cfg.task.seed,
    )
    landed: list[dict] = []

    async def run() -> tuple[dict, dict]:
        held = HeldOutEval(loop, loop.task, loop.tokenizer, cfg, lambda line: None, landed.append)
        compute = ComputeThread("test-compute")
        start = loop.version
        await held.maybe_start(compute)
        assert held.copy is not loop.model and held.running is not None
        await held.running
        first = held.take()
        assert held.take() == {}
        await held.maybe_start(compute)  # the same version: not due again
        assert held.running.done()
        while loop.version < held.due_version:
            next(learner.steps(1))
        await held.maybe_start(compute)
        later = loop.version
        list(learner.steps(2))  # the learner steps on while the copy is scored
        await held.running
        second = held.take()
        assert (first["eval_version"], second["eval_version"]) == (start, later) and loop.version > later
        compute.close()
        await held.close()
        return first, held.health()

    first, health = asyncio.run(run())
    assert first["eval_reward"] == pytest.approx(direct["eval_reward"], abs=1e-6)
    assert first["eval_pass_at_k"] == pytest.approx(direct["eval_pass"], abs=1e-6)
    assert len(landed) == 2 and health["eval_history"] == [landed[0]["eval_reward"], landed[1]["eval_reward"]]
    assert health["eval_best"] == max(health["eval_history"])
