"""New samplers' first versions, timed in a process of their own (for fuzz_learner.py).

A newcomer stands for a volunteer's own machine: timed inside the attacking process, its fetch would share that
process's event loop and interpreter with the frame fuzzer and measure the attacker's congestion, not the holders'.
It runs on every CPU whatever its parent's pinning (its daemon too). Prints one JSON list: each newcomer's seconds,
null where it failed within 120 s.

    python bench/hostile-peers/newcomer.py --run RUN --learner PEER_ID --holder MADDR [--holder MADDR ...] --tmp DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
sys.path.insert(0, str(Path(__file__).resolve().parent))  # plane_attacks

from plane_attacks import newcomer_fetch  # noqa: E402

import benchlib  # noqa: E402,F401  (puts this checkout's package first on sys.path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--learner", required=True, help="the designated learner's peer id")
    ap.add_argument("--holder", action="append", required=True, help="a weight holder's <addr>/p2p/<id>")
    ap.add_argument("--tmp", type=Path, required=True, help="where the newcomers keep their versions (removed after)")
    ap.add_argument("--tries", type=int, default=3)
    args = ap.parse_args()
    os.sched_setaffinity(0, range(os.cpu_count() or 1))  # not the attackers' pinning: a machine of its own
    print(json.dumps(asyncio.run(newcomer_fetch(args.run, args.learner, args.holder, args.tmp, args.tries))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
