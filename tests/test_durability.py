"""What a learner acknowledged survives a crash, and its versions never go backwards: the group journal (append,
group-commit sync, compaction, torn tails, replay into the buffer) and the published-version counter, on the real
tiny model and task."""

from __future__ import annotations

import asyncio

import pytest
import torch
from group_helpers import LIMITS, group

from swarmnode.config import load_config
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.checkpoint import CHECKPOINT_NAME, read_published
from swarmnode.learner.journal import GroupJournal
from swarmnode.learner.loop import LearnerLoop
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.tasks import build_task

torch.set_num_threads(1)


def test_journal_appends_syncs_compacts_and_replays(tmp_path):
    path = tmp_path / "journal"
    journal = GroupJournal(path)
    groups = [group(i) for i in range(6)]

    async def ack_all():  # concurrent acks share fsyncs
        async def one(g):
            journal.append(g.encode())
            await journal.sync()

        await asyncio.gather(*(one(g) for g in groups))

    asyncio.run(ack_all())
    assert journal.records == 6
    journal.close()
    buffer = ReplayBuffer(capacity=100, max_staleness=4, lineage="L")
    again = GroupJournal(path)
    assert again.replay_into(buffer, LIMITS) == {"ok": 6}
    assert {g.group_id for g in buffer.held()} == {g.group_id for g in groups}
    # a checkpoint keeps only what the buffer still holds; appends go on after it
    buffer.draw(4)
    again.compact(lambda: [g.encode() for g in buffer.held()])
    again.append(group(7).encode())
    again.close()
    fresh = ReplayBuffer(capacity=100, max_staleness=4, lineage="L")
    assert GroupJournal(path).replay_into(fresh, LIMITS) == {"ok": 3}


def test_torn_tail_is_cut_and_counted_and_replay_judges_staleness(tmp_path):
    path = tmp_path / "journal"
    journal = GroupJournal(path)
    journal.append(group(1, version=0).encode())
    journal.append(group(2, version=9).encode())
    journal.append(group(3, version=0).encode())
    journal.close()
    data = path.read_bytes()
    path.write_bytes(data[:-10])  # SIGKILL in the middle of the third append
    (tmp_path / "journal.tmp").write_bytes(b"half a compaction")
    buffer = ReplayBuffer(capacity=100, max_staleness=4, lineage="L", version=9)
    reopened = GroupJournal(path)
    assert not (tmp_path / "journal.tmp").exists()
    counts = reopened.replay_into(buffer, LIMITS)
    assert counts == {"ok": 1, "stale": 1, "torn": 1}  # nothing acknowledged goes uncounted
    assert buffer.stats()["counters"]["stale"] == 1
    assert reopened.records == 2 and len(path.read_bytes()) < len(data)


def test_readmit_ignores_the_dedup_memory_but_not_the_buffer(tmp_path):
    buffer = ReplayBuffer(capacity=10, max_staleness=4)
    g = group(1)
    assert buffer.add(g) == "ok"
    assert buffer.readmit(g) == "duplicate"  # still held
    buffer.draw(1)
    assert buffer.add(g) == "duplicate"  # the network path stays exactly-once
    assert buffer.readmit(g) == "ok"  # a restarted learner's replay


def test_bounds_ask_for_a_checkpoint_then_refuse(tmp_path):
    journal = GroupJournal(tmp_path / "j", soft_limit=2, hard_limit=3)
    for i in range(3):
        assert not journal.over_hard_limit
        journal.append(group(i).encode())
        assert journal.over_soft_limit == (i >= 1)
    assert journal.over_hard_limit
    journal.compact(lambda: [])
    assert journal.records == 0 and not journal.over_soft_limit


def test_a_closed_journal_refuses_new_groups_and_a_late_sync_is_harmless(tmp_path):
    """A learner stopping closes its journal while a stream may still be handing a group over: the group is
    refused "busy" (the sampler keeps it and retries), and a sync racing the close returns quietly."""
    from swarmnode.learner.buffer import RolloutInbox

    journal = GroupJournal(tmp_path / "j")
    inbox = RolloutInbox(ReplayBuffer(capacity=10, max_staleness=4, lineage="L"), journal)
    assert inbox.admit(group(0)) == "ok"
    journal.append(group(0).encode())
    journal.close()
    asyncio.run(journal.sync())  # raced the close: everything was synced by close, nothing raises
    assert journal.closed and inbox.admit(group(1)) == "busy"
    assert len(inbox.buffer) == 1


@pytest.fixture(scope="module")
def parts():
    cfg = load_config("tiny-cpu", ["model.tiny.warm_start_steps=0", "learner.device=cpu"])
    return cfg, build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)


def test_a_learner_killed_after_publishing_resumes_above_every_version_it_announced(parts, tmp_path):
    cfg, task, tokenizer = parts
    published: list[int] = []

    def loop() -> LearnerLoop:
        model = load_model(cfg.model, cfg.task, "cpu")
        return LearnerLoop(
            model,
            tokenizer,
            task,
            cfg,
            ReplayBuffer.from_config(cfg),
            lambda v, _: published.append(v),
            tmp_path,
            published_path=tmp_path / "published",
        )

    first = loop()
    first.publish_current()
    first.save()  # checkpoint at version 0
    for _ in range(3):  # three more versions announced, no checkpoint: then SIGKILL
        first._bump_version()
    assert published == [0, 1, 2, 3] and read_published(tmp_path / "published") == 3
    (tmp_path / f".{CHECKPOINT_NAME}.tmp99999999").write_bytes(b"x" * 1000)  # an interrupted save's leftover
    second = loop()
    assert second.resumed and second.step_count == 0
    assert second.version == 4 and second.buffer.version == 4  # above everything announced, not back at 0
    assert not list(tmp_path.glob(f".{CHECKPOINT_NAME}.tmp*"))
    second.publish_current()
    assert published[-1] == 4 and read_published(tmp_path / "published") == 4
    # a clean stop (checkpoint at the version it announced) resumes at that same version
    second.save()
    assert loop().version == 4


def test_a_background_publishing_learner_records_versions_ahead_and_a_checkpoint_narrows_the_record(parts, tmp_path):
    cfg, task, tokenizer = parts
    published: list[int] = []

    def loop() -> LearnerLoop:
        model = load_model(cfg.model, cfg.task, "cpu")
        return LearnerLoop(
            model,
            tokenizer,
            task,
            cfg,
            ReplayBuffer.from_config(cfg),
            lambda v, _: published.append(v),
            tmp_path,
            published_path=tmp_path / "published",
            publish_in_background=True,
        )

    first = loop()
    first.publish_current()
    for _ in range(3):
        first._bump_version()
    assert first.flush_publish(30)
    assert published[-1] == 3 and published == sorted(set(published))  # newest last, superseded ones skipped
    assert read_published(tmp_path / "published") >= 3  # recorded ahead, before anything was announced
    reserved = read_published(tmp_path / "published")
    assert loop().version == reserved + 1  # killed now (no checkpoint): above everything it may have announced
    first.save()  # a checkpoint at version 3 narrows the record: a clean restart goes on at version 3
    assert read_published(tmp_path / "published") == 3 and loop().version == 3
