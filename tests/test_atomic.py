"""The one atomic write: the target is the old file or the new one, never half of one, and a failed write leaves
no temporary file; a directory built under a temporary name goes in place once, the first builder winning."""

from __future__ import annotations

import pytest

from swarmnode.atomic import publish_dir, replacing, temp_sibling, write_atomic


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "state"
    write_atomic(path, "one\n")
    write_atomic(path, b"two\n", durable=True)
    assert path.read_text() == "two\n"
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    path = tmp_path / "state"
    write_atomic(path, "old")
    tmp = tmp_path / "state.tmp"
    with pytest.raises(RuntimeError), replacing(path, tmp=tmp) as part:
        part.write_text("half")
        raise RuntimeError("the writer failed")
    assert path.read_text() == "old" and not tmp.exists()
    assert temp_sibling(path).parent == tmp_path and temp_sibling(path).name.startswith(".state.tmp")


def test_publish_dir_lets_the_first_builder_win(tmp_path):
    out = tmp_path / "cache" / "model"
    first, second = tmp_path / "a.tmp", tmp_path / "b.tmp"
    for d, text in ((first, "first"), (second, "second")):
        d.mkdir()
        (d / "config.json").write_text(text)
    assert publish_dir(first, out) is True
    assert publish_dir(second, out) is False
    assert (out / "config.json").read_text() == "first" and not second.exists()
    with pytest.raises(OSError):
        publish_dir(tmp_path / "never-built", tmp_path / "elsewhere")
