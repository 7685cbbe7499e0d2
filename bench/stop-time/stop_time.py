"""How long a node takes to stop: a local swarm (bootstrap, tiny-cpu learner and sampler), then SIGTERM to each in
turn, timed from the signal to the process's exit.

    python bench/stop-time/stop_time.py
"""

import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT  # noqa: E402  (also puts this checkout's package first on sys.path)

sys.path.insert(0, str(ROOT / "tests"))
from swarm_helpers import LocalSwarm  # noqa: E402
from test_learner_restart import start_learner_and_sampler, wait_rows  # noqa: E402


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="stop-time-"))
    with LocalSwarm(root) as swarm:
        start_learner_and_sampler(swarm, root)
        wait_rows(root / "learner" / "learner_steps.jsonl", lambda rows: len(rows) >= 5, 300, "5 learner steps")
        for name in ("sampler", "learner", "bootstrap"):
            proc = next(p for p in swarm.procs if p.name == name)
            began = time.monotonic()
            proc.popen.send_signal(signal.SIGTERM)
            proc.popen.wait(60)
            print(
                f"{name}: exit code {proc.popen.returncode} {time.monotonic() - began:.2f} s after SIGTERM "
                f"(load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
