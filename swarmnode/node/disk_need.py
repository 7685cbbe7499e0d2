"""How much disk a node of a run needs, from its config: what `swarmnode hardware` prints under "disk".

Everything a node keeps is bounded by its config, not by how long it runs:
- weight versions (floats in `learner.publish_dtype`): `learner.keep_versions` complete ones (a learner that
  spot-checks keeps `sync.max_staleness + 1` for its checks, bounded by `trust.verify_keep_bytes`), plus the one
  being fetched or published;
- one checkpoint (a learner), twice while the next one is written beside it;
- the group journal (a learner), at most its hard limit (`learner.journal.journal_limits`) of groups;
- the steps file (a learner), rotated at `STEPS_FILE_MAX_BYTES` (twice that at most);
- the ids of the groups it accepted (a learner's exactly-once memory), compacted at twice `SEEN_CAPACITY` lines;
- with `learner.save_every`, `learner.save_total_limit` saved model directories (a version each: adapters alone
  under LoRA) plus the one being written.
Sizes are estimates (a rollout group's bytes from its token counts); deduplicated chunks make versions smaller.
"""

from __future__ import annotations

from swarmnode.config import NodeConfig, SamplerConfig
from swarmnode.learner.journal import journal_limits
from swarmnode.learner.memory import DTYPE_BYTES
from swarmnode.learner.steps_log import STEPS_FILE_MAX_BYTES
from swarmnode.node.hardware import MemoryEstimate
from swarmnode.swarm.rollout_push.receive import MAX_GROUPS_PER_READ, SEEN_CAPACITY
from swarmnode.swarm.rollout_push.seen import journal_bytes_at_most

GROUP_OVERHEAD_BYTES = 512  # ids, signature, rewards of one encoded group
TOKEN_BYTES = 12  # a token id and its behaviour log-prob, encoded


def group_bytes(sc: SamplerConfig) -> int:
    """About the encoded size of one rollout group made under `sc`."""
    return GROUP_OVERHEAD_BYTES + sc.max_prompt_length * 4 + sc.num_generations * sc.max_completion_length * TOKEN_BYTES


def disk_need(cfg: NodeConfig, estimate: MemoryEstimate) -> dict[str, int]:
    """Bytes each part of a sampler's and a learner's data directory takes at most (see the module docstring)."""
    lc = cfg.learner
    published = DTYPE_BYTES[cfg.model.dtype if lc.publish_dtype == "model" else lc.publish_dtype]
    version = int(estimate.training.get("trainable_parameters", 0) if lc.lora.enabled else estimate.parameters)
    version *= published  # a version's floats are in learner.publish_dtype (adapters alone under LoRA)
    learner_versions = lc.keep_versions
    if cfg.trust.verify_fraction > 0:
        learner_versions = max(
            learner_versions, min(cfg.sync.max_staleness + 1, cfg.trust.verify_keep_bytes // max(1, version))
        )
    checkpoint = (
        int(estimate.training.get("weights", 0)) * (0 if lc.lora.enabled else 1) + version + estimate.optimizer_bytes
    )
    journal = journal_limits(lc, cfg.sync.max_staleness)["hard_limit"] * group_bytes(cfg.sampler)
    seen = journal_bytes_at_most(SEEN_CAPACITY, MAX_GROUPS_PER_READ)
    sampler = (lc.keep_versions + 1) * version
    exports = (lc.save_total_limit + 1) * version if lc.save_every else 0
    learner = (learner_versions + 1) * version + 2 * checkpoint + journal + 2 * STEPS_FILE_MAX_BYTES + seen + exports
    return {
        "version_bytes": version,
        "sampler_versions": lc.keep_versions + 1,
        "sampler_bytes": sampler,
        "learner_versions": learner_versions + 1,
        "checkpoint_bytes": checkpoint,
        "journal_bytes": journal,
        "steps_log_bytes": 2 * STEPS_FILE_MAX_BYTES,
        "seen_ids_bytes": seen,
        "exports": lc.save_total_limit + 1 if lc.save_every else 0,
        "exports_bytes": exports,
        "learner_bytes": learner,
    }


def format_disk(disk: dict[str, int]) -> str:
    """The `swarmnode hardware` line."""

    def gb(n: int) -> str:
        return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"

    return (
        f"disk: sampler ~{gb(disk['sampler_bytes'])} ({disk['sampler_versions']} versions of "
        f"{gb(disk['version_bytes'])}); learner ~{gb(disk['learner_bytes'])} ({disk['learner_versions']} "
        f"versions, 2 x checkpoint {gb(disk['checkpoint_bytes'])}, group journal <= {gb(disk['journal_bytes'])}, "
        f"steps file <= {gb(disk['steps_log_bytes'])}, accepted ids <= {gb(disk['seen_ids_bytes'])}"
        + (f", {disk['exports']} saved model dirs {gb(disk['exports_bytes'])}" if disk.get("exports") else "")
        + "); "
        "bounded by learner.keep_versions and the config, not "
        "by run length"
    )
