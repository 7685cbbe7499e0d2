"""The scale lab at two sizes in one run (bench/scale/lab.py): a bootstrap, a learner and 8 samplers, measured
for a minute; then 16 more samplers join the same run and it is measured again at 24. Every node is real (its own
identity, p2pd and DHT node, several per process) and its control-plane bytes are counted in its own DHT handlers.
Fails if the median sampler's control-plane bytes per minute, or the learner's uploaded copies per version, grow
more than 1.5x from 8 to 24 samplers: a per-node cost that grows with the run's size. The smaller size has more
nodes (10) than the DHT's bucket (`network.dht_bucket_size`, 8): in a run smaller than its bucket every lookup
asks every node, so from 6 nodes a lookup's cost grows until the run fills the bucket (1.5x from 6 to 26 nodes,
measured quiet), whatever the run's size after. Opt-in (`--runslow`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale.lab import ScaleLab  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    pytest.mark.usefixtures("starts_processes"),
]  # minutes on a loaded 2-core machine
WINDOW_S = 60.0  # a sampler passes over every shard in 8 refreshes (40 s): a minute holds a pass or more
SETTLE_S = 30.0  # after a wave, before measuring: a joining node's first lookups fill its routing table
MAX_GROWTH = 1.5


def _measure(lab: ScaleLab) -> dict:
    lab.run_for(SETTLE_S, say=lambda _m: None)
    since = time.time()
    lab.run_for(WINDOW_S, say=lambda _m: None)
    return lab.summary(since=since, until=time.time())


def test_per_node_costs_do_not_grow_from_8_to_24_samplers(tmp_path: Path) -> None:
    # nodes of a process start 3 s apart: on a loaded machine more p2pd starting at once fail their 15 s start
    with ScaleLab(tmp_path / "lab", samplers=8, per_host=12, publish_every=20, stagger_s=3.0) as lab:
        lab.start(say=print, ready_timeout=600)
        small = _measure(lab)
        lab.add_samplers(16, say=print, ready_timeout=600)
        large = _measure(lab)
    print("8 samplers:", small, "\n24 samplers:", large)
    assert large["samplers_working"] >= 12, f"only {large['samplers_working']} of 24 samplers started: {large}"
    ctl_small = small["control_bytes_per_min"]["median_sampler"]
    ctl_large = large["control_bytes_per_min"]["median_sampler"]
    assert ctl_small and ctl_large, "no control-plane bytes were counted"
    assert ctl_large <= MAX_GROWTH * ctl_small, (
        f"the median sampler's control-plane bytes per minute grew {ctl_large / ctl_small:.2f}x from 8 to 24 "
        f"samplers ({ctl_small:,.0f} -> {ctl_large:,.0f})"
    )
    copies_small = small["learner"]["upload_copies_per_version"]
    copies_large = large["learner"]["upload_copies_per_version"]
    assert copies_small and copies_large, f"no version was published and fetched in a window: {small} {large}"
    assert copies_large <= MAX_GROWTH * max(1.0, copies_small), (
        f"the learner uploaded {copies_large:.2f} copies per version at 24 samplers against {copies_small:.2f} at 8"
    )
