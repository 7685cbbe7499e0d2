"""No silent stall (issue 60): a learner that takes no step while groups arrive says why within a minute, in
train-local, the demo's output and the run's status."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from clock_helpers import Clock

from swarmnode.observe.stall import SAY_AFTER_S, StallWatch


@dataclass
class Group:
    prompt_tokens: list[int]
    completions: list[list[int]]
    rewards: list[float] = field(default_factory=lambda: [0.0] * 4)


def test_groups_cut_at_both_caps_and_all_zero_signal_are_said_once_per_window_with_each_cause():
    clock = Clock()
    watch = StallWatch(max_prompt=32, max_completion=8, clock=clock)
    cut = Group([1] * 32, [[2] * 8] * 4)
    said = []
    for _ in range(12):
        watch.groups([cut, cut])
        clock.now += SAY_AFTER_S / 4
        said.append(watch.due())
    lines = [line for line in said if line]
    assert len(lines) == 3, said  # 135 s of stall: said at 45, 90 and 135 s
    assert "every group is zero-signal" in lines[0]
    assert "prompts hit sampler.max_prompt_length=32" in lines[0] and "raise it" in lines[0]
    assert "completions hit sampler.max_completion_length=8 before an answer" in lines[0]
    assert len(watch.short()) <= 128 and "prompts cut" in watch.short()
    watch.stepped()
    clock.now += SAY_AFTER_S * 2
    assert watch.due() == ""  # no groups since the step: starving is not a stall here


def test_a_run_that_steps_says_nothing_and_a_signal_without_cuts_names_neither_cap():
    clock = Clock()
    watch = StallWatch(max_prompt=96, max_completion=16, clock=clock)
    for _ in range(10):
        watch.groups([Group([1] * 20, [[2] * 5] * 4, [0.0, 1.0, 0.0, 0.0])])
        watch.stepped()
        clock.now += SAY_AFTER_S / 2
        assert watch.due() == ""
    watch.groups([Group([1] * 20, [[2] * 5] * 4)])
    clock.now += SAY_AFTER_S
    line = watch.due()
    assert "zero-signal" in line and "max_prompt_length" not in line and "max_completion_length" not in line


def test_a_stalled_learner_is_an_alert_in_status_and_its_record_stays_valid():
    from swarmnode.identity import Identity
    from swarmnode.observe.health import find_alerts, record_health
    from swarmnode.protocol.peer import PeerRecord

    clock = Clock()
    watch = StallWatch(max_prompt=32, max_completion=8, clock=clock)
    watch.groups([Group([1] * 32, [[2] * 8] * 4)])
    clock.now += SAY_AFTER_S
    health = record_health({"step": 0, "stalled": watch.short()})
    me = Identity.generate()
    record = PeerRecord.create(me, role="learner", health=health)
    assert PeerRecord.decode(record.encode()).health["stalled"] == watch.short()
    alerts = find_alerts([{"peer_id": me.peer_id, "role": "learner", "health": health}], 16)
    (stalled,) = [a for a in alerts if a["kind"] == "learner_stalled"]
    assert stalled["severity"] == "warning" and "prompts cut at max_prompt_length=32" in stalled["message"]


def test_the_demo_shows_each_stall_line_of_its_learners_once(tmp_path):
    from swarmnode.local.demo import stall_lines

    (tmp_path / "learner.log").write_text("learner ready\nlearner: no learner step for 45 s with 9 groups in: x\n")
    told: set[str] = set()
    assert stall_lines(tmp_path, ["learner"], told) == ["learner: no learner step for 45 s with 9 groups in: x"]
    assert stall_lines(tmp_path, ["learner"], told) == []


@pytest.mark.slow  # a real tiny model in train-local (~10 s quiet); CI's long-scenario step runs it (.ci/run)
def test_train_local_on_prompts_cut_at_the_presets_caps_says_why_it_takes_no_step(tmp_path):
    from swarmnode.config import load_config
    from swarmnode.local.trainer import LocalTrainer

    data = tmp_path / "mymath.jsonl"
    question = "A farmer has {} apples in the morning and buys {} more at the market. How many apples now?"
    data.write_text("".join(json.dumps({"q": question.format(a, 7), "s": str(a + 7)}) + "\n" for a in range(10, 40)))
    cfg = load_config(
        "tiny-cpu",
        [f"task.path={data}", "task.name=math", "task.prompt_field=q", "task.answer_field=s"]
        + ["model.tiny.warm_start_steps=0"],  # a random tiny model: no warm start on the file's format
    )
    said: list[str] = []
    trainer = LocalTrainer(cfg, progress=said.append)
    trainer.watch = StallWatch(cfg.sampler.max_prompt_length, cfg.sampler.max_completion_length, say_after=0.0)
    result = trainer.run(3, max_seconds=5.0)
    stalls = [line for line in said if line.startswith("no learner step")]
    assert result["learner_steps"] == 0 and stalls, said
    assert "prompts hit sampler.max_prompt_length=32" in stalls[0], stalls[0]
