"""TRL-style reward functions named in the config: `module:function` or `path/to/file.py:function`.

A reward function has TRL's signature, `f(prompts, completions, **columns) -> list[float | None]` (plain functions
or `async def`): `prompts` and `completions` are strings, or lists of messages for conversational prompts; each
prompt's extra columns come as keyword lists (`answer` is the reference). Each loaded function keeps the file
its module was read from, whose sha256 the run card pins (`swarmnode.tasks.pins`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

from swarmnode.errors import ExitCode
from swarmnode.tasks.base import TaskError
from swarmnode.tasks.reward_func import TASK_REWARD, RewardFunc, short_name


def _file_module(path: Path, spec: str) -> ModuleType:
    if not path.is_file():
        raise TaskError(f"task.reward_funcs {spec!r}: no file {str(path)!r}")
    name = f"swarmnode_reward_{short_name(path.stem)}_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise TaskError(f"task.reward_funcs {spec!r}: {str(path)!r} is not a Python file")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    try:
        found.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise TaskError(f"task.reward_funcs {spec!r}: importing {str(path)!r} failed ({exc!r})") from None
    return module


def _named_module(name: str, spec: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise TaskError(
            f"task.reward_funcs {spec!r}: no module {exc.name or name!r} here; install the package that "
            "provides it, or name a file: path/to/rewards.py:function"
        ) from None
    except Exception as exc:
        raise TaskError(f"task.reward_funcs {spec!r}: importing {name!r} failed ({exc!r})") from None


def load_reward_func(spec: str) -> RewardFunc:
    """The reward function `spec` names; TaskError (one line) if its module, file or function is not there."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise TaskError(
            f"task.reward_funcs {spec!r}: expected module:function or file.py:function", exit_code=ExitCode.USAGE
        )
    is_file = where.endswith(".py") or "/" in where
    module = _file_module(Path(where).expanduser(), spec) if is_file else _named_module(where, spec)
    func = getattr(module, attr, None)
    if not callable(func):
        raise TaskError(f"task.reward_funcs {spec!r}: {where} has no function {attr!r}")
    source = inspect.getsourcefile(module)
    return RewardFunc(
        spec, short_name(attr), func, None if is_file else module.__name__, Path(source) if source else None
    )


__all__ = ["TASK_REWARD", "RewardFunc", "load_reward_func", "short_name"]
