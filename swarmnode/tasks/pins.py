"""What the run card pins of a task beyond its settings: the packages it and its rewards come from, and the
sha256 of each reward function's source module.

`task_pins(task, entry_dist)` gives `{"package:<distribution>": version, "reward:<module:function>": sha256}`
(swarmnode itself is left out: the node's software version is in its record). `pin_differences(run, mine)` says,
one phrase each, what differs from the run's pins and what to install; `pin_needs(run)` lists what a machine needs
to join (`swarmnode hardware <invite>`).
"""

from __future__ import annotations

from importlib import metadata

from swarmnode.tasks.base import Task

PACKAGE, REWARD = "package:", "reward:"
OWN = "swarmnode"


def _providers(module: str | None) -> dict[str, str]:
    if not module:
        return {}
    dists = metadata.packages_distributions().get(module.split(".")[0], [])
    return {d: metadata.version(d) for d in dists if d != OWN}


def task_pins(task: Task, entry_dist: tuple[str, str] | None = None) -> dict[str, str]:
    """The task's pins (see the module docstring); `entry_dist`: (name, version) of the package registering it."""
    packages = dict(task.packages())
    if entry_dist and entry_dist[0] != OWN:
        packages[entry_dist[0]] = entry_dist[1]
    pins: dict[str, str] = {}
    funcs, _ = task.reward_funcs()
    for rf in funcs:
        digest = rf.digest() if rf.trl else None
        if digest:
            pins[REWARD + rf.spec] = digest
        packages.update(_providers(rf.module))
    pins.update({PACKAGE + name: version for name, version in packages.items() if name != OWN})
    return pins


def is_pin(key: str) -> bool:
    """True for a run card `sources` key that is a task pin."""
    return key.startswith((PACKAGE, REWARD))


def pin_differences(run: dict[str, str], mine: dict[str, str]) -> list[str]:
    """One phrase per pin of the run's that this machine lacks or holds otherwise, saying what to do."""
    out = []
    for key in sorted(k for k in run if is_pin(k)):
        name, want, have = key.split(":", 1)[1], run[key], mine.get(key)
        if have == want:
            continue
        if key.startswith(PACKAGE):
            here = f"{have} here" if have else "not installed here"
            out.append(f"task package {name} {here}, run {want} (pip install '{name}=={want}')")
        elif have:
            out.append(f"reward module of {name} sha256 {have[:12]} here, run {want[:12]} (get the run's file)")
    return out


def pin_needs(run: dict[str, str]) -> list[str]:
    """What a machine needs to install or copy for a run's task (one line each)."""
    out = [f"pip install '{k[len(PACKAGE) :]}=={v}'" for k, v in sorted(run.items()) if k.startswith(PACKAGE)]
    out += [
        f"reward {k[len(REWARD) :]} with sha256 {v[:12]}... (its module from the run's host)"
        for k, v in sorted(run.items())
        if k.startswith(REWARD)
    ]
    return out
