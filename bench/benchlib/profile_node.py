"""Run `python -m MODULE ARGS...` under cProfile in EVERY thread (cProfile alone sees only the main thread, and
a node trains, generates and publishes in worker threads); the merged stats go to OUT at exit.

    python bench/benchlib/profile_node.py OUT.prof -m swarmnode join ...
"""

from __future__ import annotations

import atexit
import cProfile
import os
import pstats
import runpy
import sys
import threading

out, flag, module, *rest = sys.argv[1:]
assert flag == "-m", "usage: profile_node.py OUT -m MODULE ARGS..."
profiles: list[cProfile.Profile] = []
_run = threading.Thread.run


def _profiled_run(self) -> None:
    prof = cProfile.Profile()
    profiles.append(prof)
    prof.enable()
    try:
        _run(self)
    finally:
        prof.disable()


def _dump() -> None:
    main.disable()
    stats = pstats.Stats(main)
    for prof in profiles:
        try:
            stats.add(prof)
        except (TypeError, ValueError):  # a profile with no data
            pass
    stats.dump_stats(out)


def _dump_then_exit(code: int) -> None:
    _dump()  # `join` and `bootstrap` leave with os._exit, which skips atexit
    _os_exit(code)


threading.Thread.run = _profiled_run
main = cProfile.Profile()
atexit.register(_dump)
_os_exit, os._exit = os._exit, _dump_then_exit
sys.argv = [module, *rest]
main.enable()
runpy.run_module(module, run_name="__main__", alter_sys=True)
