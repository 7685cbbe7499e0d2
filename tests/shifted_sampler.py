"""A swarmnode node whose generation engine reports behaviour log-probs off by a fixed engine-like shift on a few
sequences: SHIFT nats lower on every token of the first SHIFTED completions of each group, as another engine's
numerics would give (tests/test_learner_signals_swarm.py). Everything else is the real node.

    python -P tests/shifted_sampler.py -m swarmnode join ...   (LocalSwarm.join(..., python_args=[this file]))
"""

from __future__ import annotations

import runpy
import sys

from swarmnode.cli_runtime import exit_zero_on_sigterm

SHIFT = 1.0  # nats per token (the tiny model's completions are 2-3 tokens: 2-3 nats a sequence)
SHIFTED = 3  # completions of each group (of G = 8)


def install() -> None:
    """Every engine's `generate` shifted as the module says."""
    from swarmnode.sampler.engines import GenerationEngine

    honest = GenerationEngine.generate

    def generate(self, *args, **kwargs):
        out = honest(self, *args, **kwargs)
        for gen in out:
            gen.logprobs = [[x - SHIFT for x in lp] if i < SHIFTED else lp for i, lp in enumerate(gen.logprobs)]
        return out

    GenerationEngine.generate = generate  # type: ignore[method-assign]


if __name__ == "__main__":
    exit_zero_on_sigterm()  # as `python -m swarmnode`: a SIGTERM exits 0
    install()
    if sys.argv[1:3] != ["-m", "swarmnode"]:
        sys.exit("usage: python -P tests/shifted_sampler.py -m swarmnode <swarmnode arguments>")
    sys.argv = ["swarmnode", *sys.argv[3:]]
    runpy.run_module("swarmnode", run_name="__main__", alter_sys=True)
