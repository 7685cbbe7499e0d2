"""The model card (README.md) of an exported directory, and `swarmnode_export.json` beside it: which run and
version the weights are, the base model and its digest, the task, the run card's digest, the learner key that
signed the version and the held-out reward (when measured: `swarmnode export --eval`, `swarmnode eval`)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swarmnode.protocol.run_card import RunCard

META_FILE = "swarmnode_export.json"


@dataclass
class CardFacts:
    """What the card says (and `swarmnode_export.json` holds, for `swarmnode eval`)."""

    run_id: str
    version: int
    base_model: str
    base_digest: str | None
    task: str
    kind: str  # "model", "merged" (a LoRA version folded into its base) or "adapter"
    signer: str  # the learner key that signed the version's manifest
    source: str
    card_digest: str | None = None
    card_version: int | None = None
    chat_template: bool = False
    prompt_format: str = "auto"
    heldout: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # the run's config (swarmnode eval reads its task)


def card_digest(card: RunCard | None) -> str | None:
    """sha256 of the run card's signed body (what its owner signed), or None without a card."""
    return hashlib.sha256(card.body()).hexdigest() if card is not None else None


def model_card(f: CardFacts) -> str:
    """The README.md text: Hub metadata first, then the facts and how to load it."""
    library = "peft" if f.kind == "adapter" else "transformers"
    reward = (
        f"{f.heldout['eval_reward']:.4f} mean@{int(f.heldout.get('samples', 0))} over "
        f"{int(f.heldout.get('eval_prompts', 0))} held-out prompts (exact {f.heldout.get('eval_exact', 0.0):.4f})"
        if "eval_reward" in f.heldout
        else "not measured (run `swarmnode eval --model DIR`)"
    )
    base = f.base_model
    load = (
        "from peft import AutoPeftModelForCausalLM\nmodel = AutoPeftModelForCausalLM.from_pretrained(DIR)"
        if f.kind == "adapter"
        else "from transformers import AutoModelForCausalLM\nmodel = AutoModelForCausalLM.from_pretrained(DIR)"
    )
    lines = [
        "---",
        f"library_name: {library}",
        *([f"base_model: {base}"] if "/" in base and not base.startswith(("/", ".", "~")) else []),
        "tags: [swarmnode, reinforcement-learning, gepo]",
        "---",
        "",
        f"# {f.run_id} version {f.version}",
        "",
        f"Trained by a swarmnode swarm (decentralized RL post-training); a {describe(f.kind)}.",
        "",
        "| | |",
        "|---|---|",
        f"| run | `{f.run_id}` |",
        f"| version | {f.version} |",
        f"| base model | `{base}` |",
        f"| base model digest | `{f.base_digest or 'unknown'}` |",
        f"| task | `{f.task}` |",
        f"| run card digest | `{f.card_digest or 'no card (the run was set up by hand)'}`"
        + (f" (card v{f.card_version})" if f.card_version else "")
        + " |",
        f"| signed by learner key | `{f.signer}` |",
        f"| held-out reward | {reward} |",
        f"| chat template | {'yes' if f.chat_template else 'none: prompts are plain text'} |",
        f"| exported from | {f.source} |",
        "",
        "```python",
        load,
        "```",
        "",
    ]
    return "\n".join(lines)


def describe(kind: str) -> str:
    return {
        "model": "full model",
        "merged": "LoRA adapter merged into its base model",
        "adapter": "PEFT LoRA adapter for the base model below",
    }.get(kind, kind)


def write_card(out: Path, facts: CardFacts) -> None:
    """Write README.md and swarmnode_export.json into `out` (each atomically)."""
    _atomic_text(out / "README.md", model_card(facts))
    _atomic_text(out / META_FILE, json.dumps(asdict(facts), indent=2, sort_keys=True))


def read_facts(directory: Path) -> CardFacts | None:
    """The facts an export wrote into `directory`, or None when it has none."""
    try:
        return CardFacts(**json.loads((Path(directory) / META_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
