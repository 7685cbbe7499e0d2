"""`keep_freed_memory`: a KV-cache-like growth pattern stops faulting pages back in (real glibc, real torch)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from swarmnode.allocator import keep_freed_memory

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the settings are glibc's")

# Like generation's DynamicCache: each step concatenates one token's keys onto the layer's buffer, freeing the old.
GROWTH = """
import json, resource, sys, torch
from swarmnode.allocator import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "tuned" else None
torch.set_num_threads(1)
def generate():
    caches = [torch.zeros(32, 2, 0, 64) for _ in range(4)]
    for _ in range(128):
        caches = [torch.cat([c, torch.ones(32, 2, 1, 64)], dim=2) for c in caches]
generate()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    generate()
print(json.dumps({"took": took, "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5}))
"""


def faults_per_generation(arm: str) -> dict:
    out = subprocess.run([sys.executable, "-c", GROWTH, arm], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.usefixtures("starts_processes")
def test_growing_buffers_stop_faulting_once_freed_memory_is_kept():
    default, tuned = faults_per_generation("default"), faults_per_generation("tuned")
    assert tuned["took"] is True
    assert default["faults"] > 1000  # glibc gives the freed top of the heap back, and the next buffer faults it in
    assert tuned["faults"] < default["faults"] / 10


def test_keep_freed_memory_is_safe_to_call_again():
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True
