"""Starting the node's libp2p host (hivemind's bundled p2pd) the way a volunteer's machine needs it.

What this adds to `hivemind.p2p.P2P.create`:
- one overall `network.startup_timeout` (p2pd's own is a fixed 15 s), with retries and backoff;
- initial peers dialled one by one, each failure logged with the peer's address and the reason, and a
  `SwarmStartError` naming every unreachable peer when none answered in time (p2pd itself would just exit
  with "failed to connect to bootstrap peers");
- no orphan daemons: a tiny watchdog (`sh`, ~1 MB) holds the read end of a pipe whose write end only this
  process has; when this process dies for any reason (SIGKILL included) the kernel closes the pipe, the
  watchdog wakes up and stops p2pd and removes its unix sockets;
- stale `/tmp/hivemind-*.sock` files from crashed daemons are removed (only sockets nobody listens on);
- a per-machine lock keyed by peer id, so two live processes cannot share one identity.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import glob
import logging
import os
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from hivemind.p2p import P2P, P2PDaemonError, PeerID
from hivemind.utils.multiaddr import Multiaddr

from swarmnode.backoff import Backoff
from swarmnode.config import NetworkConfig
from swarmnode.errors import ExitCode, Interrupted, SwarmnodeError
from swarmnode.identity import Identity
from swarmnode.swarm.hivemind_compat import connect, daemon_socket_paths, p2p_class_with_daemon_flags, p2pd_process

logger = logging.getLogger(__name__)
STOP_REQUESTED = threading.Event()  # set on Ctrl-C / SIGTERM (`cli_runtime`): a daemon that dies then is no failure
T = TypeVar("T")

SOCKET_GLOB = "/tmp/hivemind-p2p*.sock"
_WATCHDOG_SCRIPT = (
    "read _ignored; "
    'for pid in "$@"; do grep -qs p2pd /proc/$pid/cmdline && kill -TERM $pid; done; sleep 1; '
    'for pid in "$@"; do grep -qs p2pd /proc/$pid/cmdline && kill -KILL $pid; done; '
    "rm -f $SOCKS"
)


_watchdogs: weakref.WeakKeyDictionary[P2P, tuple[subprocess.Popen, int]] = weakref.WeakKeyDictionary()


class SwarmStartError(SwarmnodeError, RuntimeError):
    """The node could not start its host or reach the swarm; the message says what and what to try."""

    exit_code = ExitCode.NETWORK


@dataclass(frozen=True)
class InitialPeer:
    """A parsed `--initial-peers` entry."""

    text: str
    peer_id: PeerID
    addr: Multiaddr  # without the /p2p/ part


def parse_initial_peer(text: str) -> InitialPeer:
    """Parse `/ip4/1.2.3.4/tcp/31337/p2p/12D3...`; SwarmStartError saying what is wrong otherwise."""
    try:
        maddr = Multiaddr(text)
        peer = maddr["p2p"]
    except Exception:
        raise SwarmStartError(
            f"initial peer {text!r} is not a multiaddr ending in /p2p/<peer id> "
            "(copy the `initial-peers:` line that `swarmnode bootstrap` prints)",
            exit_code=ExitCode.USAGE,
        ) from None
    try:
        peer_id = PeerID.from_base58(peer)
    except Exception:
        raise SwarmStartError(f"initial peer {text!r}: {peer!r} is not a peer id", exit_code=ExitCode.USAGE) from None
    return InitialPeer(text, peer_id, maddr.decapsulate(Multiaddr(f"/p2p/{peer}")))


def clean_stale_sockets(min_age_s: float = 60.0) -> list[str]:
    """Remove hivemind unix sockets older than `min_age_s` that no process listens on; returns those removed."""
    removed = []
    now = time.time()
    for path in glob.glob(SOCKET_GLOB):
        try:
            if now - os.lstat(path).st_mtime < min_age_s:
                continue
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(1.0)
                probe.connect(path)
        except ConnectionRefusedError:
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
        except OSError:
            continue
    if removed:
        logger.debug("removed %d stale p2pd sockets", len(removed))  # housekeeping, not news at every start
    return removed


class IdentityLock:
    """An exclusive per-machine lock on a peer id (flock: released by the kernel even on SIGKILL)."""

    def __init__(self, peer_id: str, lock_dir: Path | None = None):
        self.peer_id = peer_id
        base = lock_dir or Path(tempfile.gettempdir()) / f"swarmnode-locks-{os.getuid()}"
        self.path = base / f"{peer_id}.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise SwarmStartError naming the process that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise SwarmStartError(
                    f"identity {self.peer_id} is already used by a live node on this machine (pid {holder}); "
                    "give each node its own --identity-path",
                    exit_code=ExitCode.IN_USE,
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def arm_watchdog(p2p: P2P) -> subprocess.Popen:
    """Start the watchdog that stops `p2p`'s daemon when this process dies (see module docstring)."""
    daemon = p2pd_process(p2p)
    if daemon is None:
        raise RuntimeError("this P2P owns no p2pd process to watch")
    read_end, write_end = os.pipe()  # both non-inheritable; the child gets read_end as its stdin only
    try:
        watchdog = subprocess.Popen(
            ["/bin/sh", "-c", _WATCHDOG_SCRIPT, "swarmnode-watchdog", str(daemon.pid)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal Ctrl-C must not kill it before it has done its job
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SOCKS": " ".join(daemon_socket_paths(p2p))},
        )
    finally:
        os.close(read_end)
    _watchdogs[p2p] = (watchdog, write_end)
    return watchdog


def p2pd_pid(p2p: P2P) -> int | None:
    """The daemon's pid (None for a P2P that does not own one)."""
    process = p2pd_process(p2p)
    return process.pid if process is not None else None


def p2pd_alive(p2p: P2P) -> bool:
    """False once the daemon has exited (e.g. Ctrl-C or a SIGTERM to the process group reached it first)."""
    process = p2pd_process(p2p)
    return process is None or process.returncode is None


async def while_p2pd_alive(p2p: P2P, work: Awaitable[T], timeout: float) -> T:
    """Await `work` for at most `timeout` s, giving up (asyncio.TimeoutError) as soon as the daemon exits: on
    Ctrl-C the terminal signals p2pd too, and a request in flight to a dead daemon would wait out its timeout."""
    task = asyncio.ensure_future(work)
    deadline = time.monotonic() + timeout
    while not task.done():
        if not p2pd_alive(p2p) or time.monotonic() >= deadline:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise TimeoutError("p2pd has exited" if not p2pd_alive(p2p) else f"no answer in {timeout:.0f} s")
        await asyncio.wait({task}, timeout=min(0.1, max(0.0, deadline - time.monotonic())))
    return task.result()


async def stop_p2p(p2p: P2P) -> None:
    """Stop the daemon and disarm its watchdog (idempotent)."""
    try:
        await asyncio.wait_for(p2p.shutdown(), timeout=10)
    except TimeoutError:
        logger.warning("p2pd did not stop in 10 s; killing it")
        if (daemon := p2pd_process(p2p)) is not None:
            with contextlib.suppress(ProcessLookupError):
                daemon.kill()
    watchdog = _watchdogs.pop(p2p, None)
    if watchdog is not None:
        process, write_end = watchdog
        process.terminate()
        os.close(write_end)
        await asyncio.to_thread(process.wait)


def _identity_file(identity: Identity) -> tuple[str, bool]:
    """A key file p2pd can read for `identity`: its own file, or a temporary one (True: delete afterwards)."""
    if identity.path is not None and Path(identity.path).is_file():
        return str(identity.path), False
    fd, path = tempfile.mkstemp(prefix="swarmnode-key-", suffix=".key")
    with os.fdopen(fd, "wb") as f:
        f.write(identity.libp2p_key_bytes())
    return path, True


def relay_flags(net: NetworkConfig, relay_service: bool, relays: list[str] | None) -> tuple[dict, dict]:
    """(p2pd flags, `P2P.create` arguments) for this node's part in circuit relaying: a relay service with the
    configured limits (bootstraps), a reservation on `relays` for a node that cannot be dialled (it then says
    it is private at once, so p2pd's AutoRelay does not wait for AutoNAT), or neither."""
    serve = relay_service and net.use_relay
    flags: dict = {"relayService": serve}
    kwargs: dict = {}
    if serve:
        flags.update(
            relayMaxReservations=net.relay_max_reservations,
            relayMaxCircuits=net.relay_max_circuits,
            relayDataLimit=int(net.relay_data_limit_mb * 1e6),
            relayTimeLimit=f"{net.relay_time_limit_s:.0f}s",
        )
        kwargs["force_reachability"] = "public"  # p2pd relays only for a node it believes public
    if relays and net.use_relay:
        flags["relayDiscovery"] = False  # the given relays only: p2pd reserves at once, not after minutes
        kwargs.update(use_auto_relay=True, trusted_relays=list(relays), force_reachability="private")
    elif net.reachability == "public" and not serve:
        kwargs["force_reachability"] = "public"
    return flags, kwargs


async def _create_daemon(
    net: NetworkConfig,
    identity: Identity,
    client_mode: bool,
    deadline: float,
    *,
    relay_service: bool = False,
    relays: list[str] | None = None,
) -> P2P:
    flags, relay_kwargs = relay_flags(net, relay_service, relays)
    daemon = p2p_class_with_daemon_flags(flags)
    key_path, temporary = _identity_file(identity)
    attempt, backoff = 0, Backoff(0.5, 5.0, jitter=False)
    try:
        while True:
            attempt += 1
            remaining = deadline - time.monotonic()
            try:
                return await daemon.create(
                    host_maddrs=net.host_maddrs,
                    announce_maddrs=net.announce_maddrs or None,
                    nat_port_map=net.nat_port_map,
                    auto_nat=net.auto_nat,
                    use_relay=net.use_relay,
                    identity_path=key_path,
                    check_if_identity_free=False,  # hivemind only parses RSA keys; see IdentityLock / membership
                    dht_mode="client" if client_mode else "server",
                    startup_timeout=max(1.0, min(15.0, remaining)),
                    **relay_kwargs,
                )
            except (P2PDaemonError, OSError, ValueError) as exc:
                if STOP_REQUESTED.is_set():  # Ctrl-C reached p2pd as it started: the node stops, nothing failed
                    raise Interrupted("interrupted") from None
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                if isinstance(exc, ValueError) or "address already in use" in reason:
                    code = ExitCode.IN_USE if "address already in use" in reason else ExitCode.USAGE
                    raise SwarmStartError(
                        f"cannot start p2pd with host_maddrs {net.host_maddrs}: {reason}", exit_code=code
                    ) from None
                delay = backoff.failure()
                if time.monotonic() + delay >= deadline:
                    raise SwarmStartError(
                        f"p2pd did not start within {net.startup_timeout:.0f} s ({attempt} attempts; last: {reason})"
                    ) from None
                logger.warning("p2pd start attempt %d failed (%s); retrying in %.1f s", attempt, reason, delay)
                await asyncio.sleep(delay)
    finally:
        if temporary:
            os.unlink(key_path)


async def dial_peer(p2p: P2P, peer: InitialPeer, timeout: float) -> str | None:
    """None if connected, else a one-line reason."""
    try:
        await asyncio.wait_for(connect(p2p, peer.peer_id, [peer.addr]), timeout)
        return None
    except TimeoutError:
        return f"no answer in {timeout:.1f} s"
    except Exception as exc:  # ControlFailure and friends; the reason text is what the user needs
        lines = [line.strip().lstrip("* ").strip() for line in str(exc).splitlines() if line.strip()]
        return (lines[-1] if lines else type(exc).__name__)[:200]


def refused(reason: str) -> bool:
    """Whether a dial failed because the host answered that nothing listens there (final: no retry helps)."""
    return "connection refused" in reason


async def connect_initial_peers(
    p2p: P2P, peers: list[InitialPeer], deadline: float, timeout_s: float, *, refusal_is_final: bool = False
) -> list[InitialPeer]:
    """Dial every initial peer, retrying with backoff until at least one answers; SwarmStartError at deadline,
    or at once when `refusal_is_final` and every peer refused the connection (a one-shot client: `status`)."""
    attempt, backoff = 0, Backoff(0.5, 8.0, jitter=False)
    first_reasons: dict[str, str] = {}  # libp2p answers later dials with a bare "dial backoff": keep the cause
    while True:
        attempt += 1
        per_try = max(0.5, min(5.0, deadline - time.monotonic()))
        reasons = await asyncio.gather(*(dial_peer(p2p, peer, per_try) for peer in peers))
        reasons = [
            r if r is None or not r.endswith("dial backoff") else first_reasons.get(p.text, r)
            for p, r in zip(peers, reasons)
        ]
        for peer, reason in zip(peers, reasons):
            first_reasons.setdefault(peer.text, reason) if reason else None
        reached = [peer for peer, reason in zip(peers, reasons) if reason is None]
        for peer, reason in zip(peers, reasons):
            if reason is not None:
                logger.warning("initial peer %s unreachable (attempt %d): %s", peer.text, attempt, reason)
        if reached:
            return reached
        if refusal_is_final and all(reason is not None and refused(reason) for reason in reasons):
            detail = "; ".join(f"{peer.text} ({reason})" for peer, reason in zip(peers, reasons))
            raise SwarmStartError(
                f"every initial peer refused the connection: {detail}. Check the address and "
                "port, and that the bootstrap is running"
            )
        delay = backoff.failure()
        if time.monotonic() + delay >= deadline:
            detail = "; ".join(f"{peer.text} ({reason})" for peer, reason in zip(peers, reasons))
            raise SwarmStartError(
                f"none of the initial peers answered within {timeout_s:.0f} s ({attempt} attempts): {detail}. "
                "Check the address, that the bootstrap is running, and firewalls; "
                "raise --startup-timeout on slow networks"
            )
        logger.warning("no initial peer reachable yet; retrying in %.1f s", delay)
        await asyncio.sleep(delay)


async def start_p2p(
    net: NetworkConfig,
    identity: Identity,
    *,
    client_mode: bool = False,
    relay_service: bool = False,
    relays: list[str] | None = None,
) -> P2P:
    """Start p2pd for `identity` on the configured addresses and connect to the initial peers.

    `relay_service`: relay for nodes that cannot be dialled (within `network.relay_*`); `relays`: take a
    reservation on these (a node that cannot be dialled). Raises SwarmStartError (one clear line) if p2pd does not
    start, or no initial peer answers, within `network.startup_timeout` (a client-mode node gives up at once when
    every initial peer refused the connection). The daemon is watched: it dies with this process. Stop it with
    `stop_p2p`.
    """
    peers = [parse_initial_peer(text) for text in net.initial_peers]
    deadline = time.monotonic() + net.startup_timeout
    clean_stale_sockets()
    client_mode = client_mode or net.client_mode
    p2p = await _create_daemon(net, identity, client_mode, deadline, relay_service=relay_service, relays=relays)
    try:
        arm_watchdog(p2p)
        if peers:
            await connect_initial_peers(p2p, peers, deadline, net.startup_timeout, refusal_is_final=client_mode)
    except BaseException:
        await stop_p2p(p2p)
        raise
    return p2p
