"""Every use of a private internal of hivemind, its p2pd client or asyncio, in one place.

hivemind's `P2P` has no public way to reach its daemon process (to stop or watch it), its unix sockets (to
remove them after a crash), or its daemon client (to dial one peer at an address and see why it failed), and
asyncio's `StreamReader` none to tell whether it still holds unread bytes (before `FrameSink` takes over a
stream's transport); its `DecentralizedAverager` runs only as a forked process around the forked `hivemind.DHT`
wrapper, which swarmnode does not use (`ThreadedAverager` runs the same averager in a thread of the node). These
accessors use the private attributes of the pinned versions; importing this module
refuses any other hivemind version with one clear line, and tests/test_hivemind_compat.py exercises every
accessor against the installed hivemind, so an upgrade that renames an internal fails there first.
Nothing else in swarmnode touches `_`-prefixed attributes of another library's objects or attaches its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
import select
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import hivemind
from hivemind.averaging import DecentralizedAverager
from hivemind.averaging.averager import _background_thread_fetch_current_state
from hivemind.averaging.control import StepControl
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.p2p import P2P, PeerID
from hivemind.utils import get_dht_time
from hivemind.utils.multiaddr import Multiaddr

from swarmnode.errors import ExitCode, SwarmnodeError

PINNED_HIVEMIND = "1.1.12"


class HivemindVersionError(SwarmnodeError, ImportError):
    """The installed hivemind is not the version whose internals this module was written against."""

    exit_code = ExitCode.MISSING


def check_hivemind_version(installed: str = hivemind.__version__) -> None:
    """Raise HivemindVersionError unless `installed` is the pinned hivemind version."""
    if installed != PINNED_HIVEMIND:
        raise HivemindVersionError(
            f"swarmnode needs hivemind=={PINNED_HIVEMIND} (it relies on a few of its internals, see "
            f"swarmnode/swarm/hivemind_compat.py), but hivemind {installed} is installed: "
            f"pip install hivemind=={PINNED_HIVEMIND}"
        )


check_hivemind_version()


def p2pd_process(p2p: P2P) -> asyncio.subprocess.Process | None:
    """The p2pd daemon process `p2p` started (None for a P2P attached to a daemon it does not own)."""
    return p2p._child


def daemon_socket_paths(p2p: P2P) -> list[str]:
    """The unix socket paths of `p2p`'s daemon and of its client (the files a crashed daemon leaves behind)."""
    paths = []
    for maddr in (p2p._daemon_listen_maddr, p2p._client_listen_maddr):
        try:
            paths.append(maddr["unix"])
        except Exception:  # not a unix socket address
            continue
    return paths


async def connect(p2p: P2P, peer_id: PeerID, addrs: Iterable[Multiaddr]) -> None:
    """Dial `peer_id` at `addrs` through the daemon; raises the daemon's error (its text says why) on failure."""
    await p2p._client.connect(peer_id, list(addrs))


def p2p_class_with_daemon_flags(flags: dict[str, Any]) -> type[P2P]:
    """A `P2P` whose daemon gets `flags` (p2pd command-line flags, e.g. {"relayService": False}) beside what
    `P2P.create` passes: p2pd's relay-service limits and `-relayDiscovery` have no `P2P.create` argument. A flag
    given here replaces the one `P2P.create` would pass."""
    extra = dict(flags)

    class FlaggedP2P(P2P):
        @staticmethod
        def _make_process_args(*args: Any, **kwargs: Any) -> list[str]:
            return P2P._make_process_args(*args, **{**kwargs, **extra})

    return FlaggedP2P


async def disconnect(p2p: P2P, peer_id: PeerID) -> None:
    """Close this daemon's connections to `peer_id`."""
    await p2p._client.disconnect(peer_id)


async def ping_into_routing_table(node, peer_id: PeerID) -> bool:
    """Ask a DHT peer for its node id and (if it answers) put it back in `node`'s routing table (a hivemind
    DHTNode's protocol does both in `call_ping`)."""
    return await node.protocol.call_ping(peer_id) is not None


def use_local_storage(node, storage) -> None:
    """Make `storage` (a `DHTLocalStorage`, e.g. `CappedStorage`) the local storage of a hivemind `DHTNode`: what
    it keeps for others and for itself (hivemind takes no storage argument; its protocol holds the object).
    Records already stored move over."""
    for key, item in node.protocol.storage.items():
        if isinstance(item.value, DictionaryDHTValue):
            for subkey, sub in item.value.items():
                storage.store_subkey(key, subkey, sub.value, sub.expiration_time)
        else:
            storage.store(key, item.value, item.expiration_time)
    node.protocol.storage = storage


def has_buffered_bytes(reader: asyncio.StreamReader) -> bool:
    """Whether `reader` holds bytes it received that nobody has read yet."""
    return bool(reader._buffer)  # type: ignore[attr-defined]  # asyncio keeps it private


def daemon_listen_maddr(p2p: P2P) -> Multiaddr:
    """The control address of `p2p`'s daemon (what `P2P.replicate` connects a second client to)."""
    return p2p._daemon_listen_maddr


class _LocalConnection:
    """One end of an in-process duplex channel with the `multiprocessing.Connection` calls the averager makes
    (`send`, `recv`, `poll`, `fileno`): objects pass by reference, so an `MPFuture` sent along stays the same
    object (pickled through a real pipe within one process, the copy gets the result and the original returns
    None). A byte per message on an OS pipe makes `fileno()` readable while messages wait."""

    def __init__(self, inbox: queue.SimpleQueue, read_fd: int, outbox: queue.SimpleQueue, peer_write_fd: int):
        self._inbox, self._read_fd, self._outbox, self._peer_write_fd = inbox, read_fd, outbox, peer_write_fd

    def send(self, obj: Any) -> None:
        self._outbox.put(obj)
        os.write(self._peer_write_fd, b"\0")

    def recv(self) -> Any:
        os.read(self._read_fd, 1)
        return self._inbox.get()

    def poll(self, timeout: float = 0.0) -> bool:
        return bool(select.select([self._read_fd], [], [], timeout)[0])

    def fileno(self) -> int:
        return self._read_fd


def _local_pipe() -> tuple[_LocalConnection, _LocalConnection]:
    (read_a, write_a), (read_b, write_b) = os.pipe(), os.pipe()
    queue_a: queue.SimpleQueue[Any] = queue.SimpleQueue()
    queue_b: queue.SimpleQueue[Any] = queue.SimpleQueue()
    return _LocalConnection(queue_a, read_a, queue_b, write_b), _LocalConnection(queue_b, read_b, queue_a, write_a)


class ThreadedAverager(DecentralizedAverager):
    """hivemind's `DecentralizedAverager`, run in a thread of this process instead of a forked child: the same
    matchmaking, all-reduce and state download, with `dht` any object offering what the averager asks of a
    `hivemind.DHT` (`peer_id`, `client_mode`, `replicate_p2p`, `store`, `get`). Its control pipe is replaced by
    an in-process channel (see `_LocalConnection`), and `step` is hivemind's own minus the caller's second
    `attach` (with the step passed by reference, the averager's attach is the only one). `start_in_thread()`
    after construction, `stop_thread()` at the end (the averager's own `shutdown` only stops a child process)."""

    _thread: threading.Thread | None = None
    _inner_pipe: Any  # hivemind's control pipe ends, replaced by `_local_pipe` in __init__
    _outer_pipe: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, start=False, **kwargs)
        self._inner_pipe.send(("_SHUTDOWN", None))  # ends the state-request thread listening on the real pipe
        self._inner_pipe, self._outer_pipe = _local_pipe()
        threading.Thread(
            target=_background_thread_fetch_current_state,
            daemon=True,
            name="averager-state",
            args=[self.serializer, self._outer_pipe, weakref.WeakMethod(self.get_current_state)],
        ).start()

    def start_in_thread(self, timeout: float) -> None:
        """Run the averager's loop in a daemon thread and wait until it serves requests (raises on failure)."""
        policy = asyncio.get_event_loop_policy()
        self._thread = threading.Thread(target=self.run, name="hivemind-averager", daemon=True)
        self._thread.start()
        try:
            self.wait_until_ready(timeout)
        finally:  # the averager installs uvloop's policy process-wide: later loops keep the one we had
            asyncio.set_event_loop_policy(policy)
        self._outer_pipe.send(("_quiet_closed_streams", [], {}))

    async def _quiet_closed_streams(self) -> None:
        """On the averager's loop: a stream the daemon opens to this client and closes at once is not an error
        (asyncio would print a traceback for each); everything else goes to the default handler."""

        def handler(loop: asyncio.AbstractEventLoop, context: dict) -> None:
            if not isinstance(context.get("exception"), asyncio.IncompleteReadError):
                loop.default_exception_handler(context)

        asyncio.get_running_loop().set_exception_handler(handler)

    def stop_thread(self, timeout: float) -> None:
        """Leave the averaging (handlers removed, running groups finalized), end the thread and its P2P client."""
        self._inner_pipe.send(("_SHUTDOWN", None))  # ends the state-request thread
        if self._thread is None or not self._thread.is_alive():
            return
        self._outer_pipe.send(("_shutdown", [timeout], {}))
        self._thread.join(timeout + 5)

    def step(
        self, gather: Any = None, timeout: float | None = None, allow_retries: bool = True, weight: float = 1.0
    ) -> Any:
        """One round (matchmaking, then all-reduce) within `timeout` seconds; the data gathered from the group,
        keyed by peer id. Raises when no group formed or the all-reduce failed."""
        now = get_dht_time()
        deadline = now + timeout if timeout is not None else float("inf")
        data = self.serializer.dumps([self.bandwidth, self.mode.value, self.serializer.dumps(gather)])
        step = StepControl(
            scheduled_time=now + self.matchmaking_kwargs["min_matchmaking_time"],
            deadline=deadline,
            allow_retries=allow_retries,
            weight=weight,
            data_for_gather=data,
        )
        attached: concurrent.futures.Future = concurrent.futures.Future()
        self._outer_pipe.send(("_step", [], dict(step=step, future_for_init=attached)))
        attached.result()
        step.allow_allreduce()
        return step.result()

    async def _shutdown(self, timeout: float | None) -> None:
        try:
            await super()._shutdown(timeout)
        finally:
            await self._p2p.shutdown()  # the replica client this averager opened (the daemon is the node's)
            others = [
                t
                for t in asyncio.all_tasks()  # but this one and the control loop awaiting it
                if t is not asyncio.current_task() and getattr(t.get_coro(), "__name__", "") != "_run"
            ]
            for task in others:  # the periodic state declaration and what a failed round left behind
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

    def __del__(self) -> None:  # the base class would try to stop a child process
        pass
