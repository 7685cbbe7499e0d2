"""What the bench scripts share: this checkout on the import path, the common arguments, core pinning and
writing results.

A study's script starts with

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
    from benchlib import ROOT, config_args, core_pair, results_dir, write_results

Importing benchlib puts this checkout's package first on `sys.path` (not an installed swarmnode). Modules:
- `neighbour_load`  a sampler's load without a swarm, pinned to a core (the busy neighbour of a timed core)
- `netns_hosts`     separate "machines" on this one: network namespaces with a capped upload (needs root)
- `nat_lab`         home routers in namespaces: MASQUERADE NATs, double NAT, capped uplinks (needs root, iptables)
- `profile_node`    run a node under cProfile (a bench's `--profile`)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: bench/benchlib/ -> bench/ -> the root
TESTS = ROOT / "tests"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def use_test_helpers() -> None:
    """Put tests/ on the import path: the benches that start real swarms use its process helpers."""
    if str(TESTS) not in sys.path:
        sys.path.insert(1, str(TESTS))


def config_args(ap: argparse.ArgumentParser, default: str | None = "tiny-cpu") -> None:
    """`--config NAME_OR_PATH` and repeatable `--set key=value` (as every swarmnode command takes them; the
    values land in `args.config` and `args.sets`)."""
    ap.add_argument("--config", default=default, help="preset name or YAML path")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config override key=value (repeatable)")


def core_pair(text: str) -> tuple[str, str]:
    """`--cores A,B`: two different cores this process may run on (an argparse type: a clear error otherwise)."""
    cores = text.split(",")
    allowed = os.sched_getaffinity(0)
    if len(cores) != 2 or not all(c.isdigit() for c in cores) or cores[0] == cores[1]:
        raise argparse.ArgumentTypeError(f"{text!r}: expected two different core numbers, e.g. 0,1")
    if missing := [c for c in cores if int(c) not in allowed]:
        raise argparse.ArgumentTypeError(
            f"core {', '.join(missing)} is not available here (cores: {','.join(map(str, sorted(allowed)))})"
        )
    return cores[0], cores[1]


def pin(core: str | int) -> list[str]:
    """The command prefix that runs a child on one core: `taskset -c CORE`."""
    return ["taskset", "-c", str(core)]


def results_dir(script: str) -> Path:
    """A study's results folder: `results/` beside its script."""
    return Path(script).resolve().parent / "results"


def write_results(out: Path | None, doc: dict, text: str) -> None:
    """Write `doc` to `<out>.json` and `text` to `<out>.md` (folders made); nothing when `out` is None."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    out.with_suffix(".md").write_text(text)
