"""The trust root a node needs before it works: whose weights a sampler loads (`trust.learner_keys`)."""

from __future__ import annotations

from swarmnode.config.schema import NodeConfig
from swarmnode.errors import UsageError


def check_trust_root(cfg: NodeConfig) -> None:
    """A node that may load a learner's weights knows whose: `trust.learner_keys`, or an explicit insecure opt-out
    (a sampler would otherwise load weights from any key that announces a version). A learner loads none, and
    neither does a SAPO node (every node trains its own policy; only text is shared)."""
    if cfg.role == "learner" or cfg.mode == "sapo" or cfg.trust.learner_keys or cfg.trust.accept_any_learner:
        return
    raise UsageError(
        "trust.learner_keys is empty: a sampler loads weights only from the run's designated "
        "learners; add --set trust.learner_keys=[PEER_ID] (`swarmnode identity --identity-path "
        "LEARNER_KEY` prints a learner's peer id), or join with --role learner; "
        "for a throwaway local run, --insecure-accept-any-learner"
    )
