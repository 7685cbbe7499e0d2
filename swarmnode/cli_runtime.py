"""How the CLI runs a command: an event loop that SIGTERM/SIGINT stop cleanly, and where logs go."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Any, Callable


class NoAnswerError(RuntimeError):
    """A command that waits on the swarm got no answer within its timeout."""


def run_until_signal(main: Callable[[asyncio.Event], Any], timeout: float | None = None) -> Any:
    """Run `main(stop)` in a fresh event loop; SIGTERM/SIGINT set `stop` so `main` can leave cleanly."""
    async def runner() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if timeout is None:
            return await main(stop)
        try:
            return await asyncio.wait_for(main(stop), timeout)
        except asyncio.TimeoutError:
            raise NoAnswerError(f"no answer from the swarm within {timeout:.0f} s") from None

    return asyncio.run(runner())


def setup_logging(verbose: bool = False) -> None:
    """Send our logs to stderr; keep hivemind's per-RPC chatter (unreachable peers etc.) out of the way."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("swarmnode").setLevel(logging.INFO)
    logging.getLogger("hivemind").setLevel(logging.DEBUG if verbose else logging.CRITICAL)
