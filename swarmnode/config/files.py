"""Where a config comes from: a YAML preset, a YAML file, and `--set a.b=c` overrides.

A preset is a name looked up, in order, in `./configs/` (the current directory's own presets) and in the project's
presets: the clone's top-level `configs/`, which a wheel carries as `swarmnode/config/presets/` (setup.py copies
them; read with importlib.resources), so a clone and a wheel list the same presets.

Every error a user can cause here (unknown key, wrong type, out-of-range value, missing preset) is raised as
`ConfigError` with one line naming the key and what is allowed; the CLI prints it and exits with code 2.
"""

from __future__ import annotations

import difflib
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from swarmnode.config.schema import NodeConfig
from swarmnode.errors import ExitCode, SwarmnodeError


def shipped_presets() -> Traversable:
    """The project's presets: inside an installed wheel, else the clone's top-level `configs/`."""
    packaged = files("swarmnode.config") / "presets"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "configs"


PRESET_DIRS: tuple[Traversable, ...] = (Path.cwd() / "configs", shipped_presets())


class ConfigError(SwarmnodeError, ValueError):
    """A user mistake in configuration; its message is one line, fit to print as is."""

    exit_code = ExitCode.USAGE


def _preset_files() -> dict[str, Traversable]:
    """Every preset by name; a name in `./configs/` hides the shipped preset of that name."""
    found: dict[str, Traversable] = {}
    for directory in PRESET_DIRS:
        if not directory.is_dir():
            continue
        for entry in directory.iterdir():
            if entry.name.endswith(".yaml") and entry.is_file():
                found.setdefault(entry.name.removesuffix(".yaml"), entry)
    return found


def preset_names() -> list[str]:
    """Names of the YAML presets: the package's own and those in `./configs/`."""
    return sorted(_preset_files())


def known_run_ids() -> list[str]:
    """The default run id and those of the shipped presets: the runs a status client looks for when its own
    run has no nodes (a DHT key is a hash, so a run id cannot be read back from the keys a node sees)."""
    ids = {NodeConfig.model_fields["run_id"].default}
    for path in _preset_files().values():
        try:
            run_id = (yaml.safe_load(path.read_text()) or {}).get("run_id")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if isinstance(run_id, str):
            ids.add(run_id)
    return sorted(ids)


def _find_config_file(spec: str) -> Traversable:
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    preset = _preset_files().get(spec)
    if preset is not None:
        return preset
    raise ConfigError(f"config {spec!r}: no such file or preset (presets: {', '.join(preset_names()) or 'none'})")


def _parse_scalar(text: str) -> Any:
    """`--set` values are YAML scalars/lists: `3`, `0.5`, `true`, `null`, `[a, b]`, `gepo`."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _yaml_problem(exc: Exception) -> str:
    """A YAML error in one phrase, with the line and column where the parser saw it (1-based)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def apply_override(data: dict, assignment: str) -> None:
    """Apply one `a.b.c=value` override to a nested dict in place."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected key=value, e.g. learner.cppo_beta=0.005")
    key, _, raw = assignment.partition("=")
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set {assignment!r}: empty key")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {part!r} is a value, not a section")
        node = child
    node[parts[-1]] = _parse_scalar(raw)


def _describe(error: ErrorDetails) -> str:
    loc = ".".join(str(p) for p in error["loc"]) or "config"
    kind = error["type"]
    if kind == "extra_forbidden":
        section: Any = NodeConfig
        for part in error["loc"][:-1]:
            field = getattr(section, "model_fields", {}).get(str(part))
            section = field.annotation if field is not None else section
        keys = list(getattr(section, "model_fields", {}).keys())
        close = difflib.get_close_matches(str(error["loc"][-1]), keys, n=1)
        if close:  # a typo: the key meant first, the whole list after
            return f"{loc}: unknown key: did you mean {'.'.join([*map(str, error['loc'][:-1]), close[0]])}?"
        return f"{loc}: unknown key (allowed here: {', '.join(keys)})"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return f"{loc}: {error['input']!r} is not allowed (allowed: {expected})"
    message = error["msg"].removeprefix("Value error, ")  # pydantic's prefix for a validator's ValueError
    if not error["loc"]:  # a whole-config check: its message names the keys; the input is the whole config
        return message
    return f"{loc}: {message} (got {error.get('input')!r})"


def build_config(data: dict) -> NodeConfig:
    """Validate a plain dict into a NodeConfig, or raise ConfigError with one line per problem."""
    try:
        return NodeConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("; ".join(_describe(e) for e in exc.errors())) from None


def load_config(spec: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> NodeConfig:
    """Load a preset name or YAML path (default: built-in defaults), then apply `key=value` overrides."""
    return build_config(load_config_data(spec, overrides))


def load_config_data(spec: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The raw config data (nested dict, not validated) of a preset or YAML path with `key=value` overrides."""
    data: dict = {}
    if spec:
        path = _find_config_file(spec)
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"config {path}: cannot read YAML ({_yaml_problem(exc)})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config {path}: top level must be a mapping of sections")
        data = loaded
    for assignment in overrides:
        apply_override(data, assignment)
    return data
