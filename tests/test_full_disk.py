"""A full disk is a message, not a corruption: on a real small filesystem (a tmpfs this test mounts and unmounts),
the weight store, the learner's checkpoint and its group journal refuse a write that does not fit with one line
naming the directory and the space needed, keep what they had intact, leave no temporary file, and write again
once space is back."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch
from group_helpers import LIMITS, group
from weights_helpers import assert_same, make_state, store

from swarmnode.diskspace import DiskFullError, SpaceWatch, free_bytes, is_disk_full
from swarmnode.identity import Identity
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.checkpoint import CHECKPOINT_NAME, save_checkpoint
from swarmnode.learner.journal import GroupJournal
from swarmnode.swarm.follower import DISK_RETRY_S, WeightFollower

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")


@pytest.fixture
def small_fs(tmp_path):
    """A 6 MB tmpfs at `tmp_path/fs`, unmounted after the test (lazily if a file is still open)."""
    mount = tmp_path / "fs"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(mount: Path, leave: int = 0) -> Path:
    """Fill the filesystem, leaving about `leave` bytes free; the filler file (delete it to give space back)."""
    path = mount / "filler"
    with open(path, "wb") as fh:
        block = b"\0" * (64 << 10)
        try:
            while free_bytes(mount) > leave + len(block):
                fh.write(block)
                fh.flush()
        except OSError:
            pass
    return path


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.endswith(".tmp") or ".tmp" in p.name]


@pytest.mark.usefixtures("starts_processes")
def test_a_store_on_a_full_disk_says_so_once_keeps_its_versions_and_publishes_again(small_fs):
    lines: list[str] = []
    ws = store(small_fs, "weights")
    ws.space = SpaceWatch(small_fs, lines.append)
    me = Identity.generate()
    ws.publish(1, make_state(1), me)
    filler = fill(small_fs, leave=256 << 10)
    for version in (2, 3):  # the node tries every new version: one line for the whole shortage
        with pytest.raises(DiskFullError) as caught:
            ws.publish(version, make_state(version), me)
        assert str(small_fs) in str(caught.value) and "needs" in str(caught.value)
    assert len(lines) == 1 and lines[0].startswith(f"disk full: {small_fs} has ") and "MB" in lines[0], lines
    assert ws.versions() == [1] and not temp_files(ws.root)
    assert_same(ws.state_dict(1), make_state(1))  # what it had is intact
    filler.unlink()
    ws.publish(4, make_state(4), me)
    assert ws.versions() == [1, 4] and len(lines) == 2 and lines[1].startswith("disk space back:"), lines
    assert_same(ws.state_dict(4), make_state(4))


@pytest.mark.usefixtures("starts_processes")
def test_a_chunk_write_that_meets_a_full_disk_leaves_no_partial_file(small_fs):
    ws = store(small_fs, "weights")  # no SpaceWatch: the write itself finds the disk full
    fill(small_fs, leave=16 << 10)
    with pytest.raises(DiskFullError, match="disk full: .* needs"):
        ws.write_chunk("ab" * 32, bytes(256 << 10))
    assert not list((ws.root / "chunks").iterdir())


@pytest.mark.usefixtures("starts_processes")
def test_a_checkpoint_that_does_not_fit_keeps_the_previous_one(small_fs):
    ckpt = small_fs / "checkpoints"
    first = {"model": {"w": torch.arange(1000, dtype=torch.float32)}, "step": 1}
    save_checkpoint(ckpt, first)
    fill(small_fs, leave=64 << 10)
    big = {"model": {"w": torch.zeros(1 << 20)}, "step": 2}  # 4 MB: does not fit
    with pytest.raises(DiskFullError, match=f"disk full: {ckpt} has .* the checkpoint needs"):
        save_checkpoint(ckpt, big)
    assert sorted(p.name for p in ckpt.iterdir()) == [CHECKPOINT_NAME]
    kept = torch.load(ckpt / CHECKPOINT_NAME, weights_only=True)
    assert kept["step"] == 1 and torch.equal(kept["model"]["w"], first["model"]["w"])


@pytest.mark.usefixtures("starts_processes")
def test_a_journal_sync_on_a_full_disk_acknowledges_nothing_and_leaves_no_torn_record(small_fs):
    path = small_fs / "group_journal"
    journal = GroupJournal(path)
    kept = [group(i) for i in range(3)]

    async def ack(groups):
        for g in groups:
            journal.append(g.encode())
        await journal.sync()

    asyncio.run(ack(kept))
    filler = fill(small_fs, leave=0)
    big = [group(100 + i) for i in range(400)]  # more than the few bytes left
    with pytest.raises(DiskFullError):
        asyncio.run(ack(big))
    with pytest.raises(DiskFullError):  # a waiter for records the failed sync dropped is never told "synced"
        asyncio.run(journal.sync())
    assert journal.records == 3
    filler.unlink()
    later = [group(500), group(501)]
    asyncio.run(ack(later))
    journal.close()
    again = GroupJournal(path)
    buffer = ReplayBuffer(capacity=100, max_staleness=4, lineage="L")
    assert again.torn == 0
    assert again.replay_into(buffer, LIMITS) == {"ok": 5}
    assert {g.group_id for g in buffer.held()} == {g.group_id for g in kept + later}


def test_a_fetch_that_finds_the_disk_full_waits_a_few_seconds_not_a_growing_backoff():
    async def newest():
        return 7, {}

    async def fetch(version, pointer):
        raise DiskFullError("disk full: /x has 0.0 MB free, version 7 needs 2.0 MB", Path("/x"), 1)

    follower = WeightFollower(newest, fetch)

    async def tries():
        for _ in range(3):
            follower.backoff.not_before = -float("inf")
            await follower.poll(wait=True, timeout=5)

    began = time.monotonic()
    asyncio.run(tries())
    assert follower.failures == 0 and follower.backoff.failures == 0 and follower.offered == -1
    assert 0 < follower.backoff.not_before - began <= DISK_RETRY_S + (time.monotonic() - began)
    assert is_disk_full(RuntimeError("wrapped").with_traceback(None)) is False
