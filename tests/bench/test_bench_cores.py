"""`--cores A,B` of the benches that pin work to two cores: a clear error for what cannot be pinned."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # benchlib

from benchlib import core_pair  # noqa: E402


def test_two_available_cores_are_accepted():
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("one core here")
    a, b = cores[:2]
    assert core_pair(f"{a},{b}") == (str(a), str(b))


@pytest.mark.parametrize("text", ["0", "0,0", "a,b", "0,1,2", ""])
def test_malformed_pairs_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="two different core numbers"):
        core_pair(text)


def test_a_core_this_process_cannot_use_is_refused():
    absent = max(os.sched_getaffinity(0)) + 1
    with pytest.raises(argparse.ArgumentTypeError, match=f"core {absent} is not available"):
        core_pair(f"0,{absent}")
