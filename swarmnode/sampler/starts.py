"""How many times a node's sampling has started in its data directory: a restarted sampler mixes the count into
its seed (`loop.sampler_seed`), so it draws new prompts and samples instead of replaying the first run's, while a
run stays reproducible from its task seed, peer ids and start counts."""

from __future__ import annotations

from pathlib import Path

from swarmnode.atomic import write_atomic


def next_start(data_dir: Path | str, name: str = "sampler") -> int:
    """This start's number (0 the first time) for `name` in `data_dir`; the count there goes up by one (written
    atomically; an unreadable count starts again at 0)."""
    path = Path(data_dir) / f"{name}_starts"
    try:
        count = int(path.read_text().strip())
    except (OSError, ValueError):
        count = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, f"{count + 1}\n", tmp=path.with_suffix(".tmp"))
    return count
