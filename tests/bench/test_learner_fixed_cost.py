"""bench/learner-fixed-cost/fixed_cost.py runs on CPU for one tiny configuration, against an old tree too, and
the learner step reads back far fewer values than before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "learner-fixed-cost" / "fixed_cost.py"
TINY = ["--lengths", "1,4", "--prompts", "2", "--rows", "2", "--repeats", "1", "--set", "model.tiny.warm_start_steps=0"]


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_bench_fits_fixed_and_per_token_cost_against_an_old_tree(tmp_path):
    out = tmp_path / "fixed_cost.json"
    # the old tree is this one: the comparison machinery (subprocesses, alternation, medians) is what is tested
    run = _run(*TINY, "--old", str(ROOT), "--rounds", "1", "--json", str(out))
    assert run.returncode == 0, run.stderr[-2000:]
    assert "fixed cost new/old" in run.stdout or "fixed" in run.stdout
    doc = json.loads(out.read_text())
    for tree in ("old", "new"):
        assert set(doc["results"][tree]) == {"1", "4"}
        for point in doc["results"][tree].values():
            assert point["rows"] == 4 and point["median_s"] > 0 and point["syncs"] >= 1
        assert set(doc["fit"][tree]) == {"fixed_s", "per_token_us"}
    assert doc["results"]["new"]["4"]["tokens"] - doc["results"]["new"]["1"]["tokens"] == 4 * 3
    assert doc["meta"]["device"] == "cpu" and len(doc["meta"]["load"]) == 3


def test_a_learner_step_reads_back_few_values():
    """Outside the optimiser (whose step counters live on the host), a GEPO step converts at most a handful of
    tensors to Python; before the batched readbacks it was 37 on this configuration."""
    code = (
        f"import sys, copy; sys.argv=['x']; sys.path.insert(0, {str(BENCH.parent)!r})\n"
        "import fixed_cost as fc\n"
        "cfg, base, tok, task = fc.build('tiny', 'cpu', 'float32', 4, ['model.tiny.warm_start_steps=0'])\n"
        "groups = fc.make_groups(cfg, base, tok, task, 4, 4, 3)\n"
        "learner = fc.new_learner(cfg, copy.deepcopy(base), tok, task)\n"
        "fc.one_step(learner, groups, 'cpu')\n"
        "print(fc.count_syncs(learner, groups, 'cpu'))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    count = int(run.stdout.strip().splitlines()[-1])
    assert 1 <= count <= 16, count


def test_bad_lengths_get_a_one_line_error():
    run = _run("--lengths", "1,x", timeout=120)
    assert run.returncode == 2 and "expected comma-separated integers" in run.stderr
    assert "Traceback" not in run.stderr
