"""Several learners of one run train one policy: local GEPO steps, and every `learner.average_every` steps a round
of parameter averaging through hivemind's own `DecentralizedAverager` (DiLoCo-style; the optimiser state stays
local). swarmnode adds no averaging protocol of its own; it adds three things around hivemind's:

- `DHTBridge`: the averager's matchmaking and state-sharing records go through the node's own DHT (the run's
  hivemind `DHTNode`, on the node's event loop), under `averaging_prefix(run_id)`, in the run's owned and signed
  record form (`swarmnode.swarm.validator`). With `trust.learner_keys` set, only those learners are seen as
  group leaders or state donors.
- `ParameterAverager` (hivemind's averager run in a thread of the node, `ThreadedAverager`): it averages
  float64 copies of the trainable parameters. The float32 mean hivemind's reducer computes comes back as a
  delta (`mean - mine`), and `mine + delta` is exactly that mean in float64 whenever the two lie within 2^28 of
  each other in magnitude, so after a round every member holds bit-identical weights (and publishes identical
  chunks) in all but vanishingly rare cases; with float32 copies, any weight that changed sign between two
  learners would differ in its last bit.
- The version number: every member gathers its current version into the round (hivemind's all-gather that
  comes with a round) and all adopt `max(gathered versions) + 1`, so every member publishes the same number for
  the same weights. A learner that joins late downloads the last published state and its version from a peer
  (`load_state_from_peers`).
- The outer step (DiLoCo's outer optimiser, as plain SGD on the pseudo-gradient): with `outer_lr` k, a round's
  result is `anchor + k * (mean - anchor)`, the anchor being the weights every member started the interval
  from (the last round's result, or the state loaded from a peer). k = 1 is plain averaging; k = N, for N
  learners on disjoint groups, moves the weights by the sum of their local updates, about as far as one learner
  would move on all those groups. It is applied only where the group can agree: each member gathers a hash of
  its anchor (none once it has published versions of its own since) and its k, and only a round whose members
  all gathered the same ones steps past the mean; any other round takes the mean, which becomes the next anchor.

A round that finds no group within `learner.averaging_timeout` (a dead or slow peer), whose group holds a
peer that is not a designated learner, or of whose averaged result a part did not come back (`ParameterAverager`),
changes nothing: the learner keeps training locally and counts it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import torch
from hivemind.averaging.allreduce import AllreduceException
from hivemind.p2p import P2P, PeerID
from hivemind.utils.timed_storage import ValueWithExpiration

from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.hivemind_compat import ThreadedAverager, daemon_listen_maddr
from swarmnode.swarm.validator import averaging_prefix, owned_subkey, split_subkey

logger = logging.getLogger(__name__)

MIN_MATCHMAKING_S = 2.0  # a leader whose group is not full waits this long for more learners
BRIDGE_TIMEOUT_S = 30.0  # a blocking DHT call from the averager's thread gives up after this
MIN_GET_INTERVAL_S = 0.25  # hivemind's matchmaking re-reads its group key in a loop while it waits for peers


class DHTBridge:
    """What hivemind's averager asks of a `hivemind.DHT` (`peer_id`, `client_mode`, `replicate_p2p`, `store`,
    `get`), served by `dht` on `loop` (the node's loop) from the averager's own thread. Values travel as msgpack
    scalars under the owner's subkey; `trusted` (peer ids; empty: anyone) filters what `get` returns."""

    client_mode = False

    def __init__(self, dht: SwarmDHT, loop: asyncio.AbstractEventLoop, trusted: Iterable[str] = ()) -> None:
        self.dht, self.loop = dht, loop
        self.peer_id: PeerID = dht.p2p.peer_id
        self.trusted = frozenset(trusted)
        self._last_get: dict[str, float] = {}

    async def replicate_p2p(self) -> P2P:
        """A second client of the node's p2pd, for the averager's own loop."""
        return await P2P.replicate(daemon_listen_maddr(self.dht.p2p))

    def _run(self, coroutine: Any, return_future: bool) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return asyncio.wrap_future(future) if return_future else future.result(BRIDGE_TIMEOUT_S)

    def store(self, key: str, subkey: bytes, value: Any, expiration_time: float, return_future: bool = False) -> Any:
        """Store this averager's `value` (a bool, number or None) under `key`."""
        owner = PeerID(subkey).to_base58()
        if owner != self.peer_id.to_base58():
            raise ValueError("an averager can only store its own records")
        payload = msgpack.packb(value)
        return self._run(self.dht.node.store(key, payload, expiration_time, subkey=owned_subkey(owner)), return_future)

    def get(self, key: str, latest: bool = False, return_future: bool = False) -> Any:
        """Every (trusted) averager's value under `key`, keyed by peer id bytes, as hivemind's DHT returns it."""
        return self._run(self._get(key), return_future)

    async def _get(self, key: str) -> ValueWithExpiration | None:
        wait = self._last_get.get(key, -float("inf")) + MIN_GET_INTERVAL_S - time.monotonic()
        if wait > 0:  # paced: alone, a waiting averager would otherwise spin on DHT reads
            await asyncio.sleep(wait)
        self._last_get[key] = time.monotonic()
        found = await self.dht.node.get(key, latest=True)
        if found is None or not isinstance(found.value, dict):
            return None
        out = {}
        for subkey, item in found.value.items():
            _, owner = split_subkey(subkey) if isinstance(subkey, str) else ("", "")
            if not owner or (self.trusted and owner not in self.trusted) or not isinstance(item.value, bytes):
                continue
            try:
                out[PeerID.from_base58(owner).to_bytes()] = ValueWithExpiration(
                    msgpack.unpackb(item.value), item.expiration_time
                )
            except Exception:  # validated on receipt; anything odd is skipped, never fatal
                continue
        return ValueWithExpiration(out, found.expiration_time)


SharedState = tuple[dict[str, Any], Sequence[torch.Tensor]]


class ParameterAverager(ThreadedAverager):
    """hivemind's averager over float64 copies of a learner's parameters; `shared()` is what a joining learner
    downloads: ({"version": v}, the tensors published as version v)."""

    def __init__(
        self,
        tensors: Sequence[torch.Tensor],
        bridge: DHTBridge,
        prefix: str,
        target_group_size: int,
        timeout: float,
        shared: Callable[[], SharedState],
    ) -> None:
        super().__init__(
            tensors,
            bridge,
            prefix=prefix,
            target_group_size=target_group_size,
            min_group_size=2,
            min_matchmaking_time=MIN_MATCHMAKING_S,
            request_timeout=MIN_MATCHMAKING_S / 2,
            allreduce_timeout=timeout,
            next_chunk_timeout=timeout / 2,
            declare_state_period=max(10.0, timeout),
        )
        self._shared = shared

    def get_current_state(self) -> tuple[dict[str, Any], Sequence[torch.Tensor], None]:
        metadata, tensors = self._shared()
        return metadata, tensors, None

    async def _run_allreduce_inplace_(
        self, tensors: Sequence[torch.Tensor], group_info: Any, group_id: bytes | None = None, **kwargs: Any
    ) -> None:
        """hivemind's all-reduce, failed when any part of the result did not come back: hivemind then keeps this
        member's own values for that part, and the member would publish the agreed version with weights the
        others do not hold. Failing the round instead leaves the learner's parameters untouched."""
        await super()._run_allreduce_inplace_(tensors, group_info, group_id, **kwargs)
        runner = self._running_groups[group_info.group_id if group_id is None else group_id].result()
        missing = runner.tensor_part_container.failed_size
        if missing:
            raise AllreduceException(
                f"{missing} of {runner.tensor_part_container.total_size} averaged values "
                "did not come back from the group"
            )


def agreed_outer_lr(gathered: list[Any], anchor: str | None, outer_lr: float) -> float:
    """The outer step a round takes: `outer_lr` when every member gathered this anchor and this step size (so
    every member computes the same weights), else 1.0, the plain mean."""
    same = all(isinstance(g, dict) and g.get("anchor") == anchor and g.get("outer_lr") == outer_lr for g in gathered)
    return outer_lr if anchor is not None and same else 1.0


@dataclass
class RoundResult:
    """One averaging round's outcome: the agreed version (None: the round failed and changed nothing)."""

    version: int | None
    group_size: int
    seconds: float
    error: str = ""
    outer_lr: float = 1.0  # the outer step taken: 1.0 for the plain mean


class LearnerAveraging:
    """A learner's side of the averaging: `round(version)` averages `params` in place with the run's other
    learners and returns the agreed version; `load_from_peers()` fetches the current state of one of them.
    Both block: call them from the training thread (never during a step). `stop()` at the end."""

    def __init__(
        self,
        params: Sequence[torch.Tensor],
        dht: SwarmDHT,
        run_id: str,
        *,
        group_size: int,
        timeout: float,
        trusted: Iterable[str] = (),
        loop: asyncio.AbstractEventLoop | None = None,
        outer_lr: float = 1.0,
        version: int = 0,
    ) -> None:
        self.params = list(params)
        self.timeout = timeout
        self.outer_lr = outer_lr
        self.anchor: list[torch.Tensor] = []  # CPU copies of the weights the current interval started from
        self.anchor_id: str | None = None
        self.anchor_version = -1  # the version those weights were published as (or started at)
        self.set_anchor(version)
        self.trusted = frozenset(trusted)
        self.rounds = self.failures = 0
        self.last: RoundResult | None = None
        self._shared: SharedState = ({"version": -1}, [p.detach().cpu().clone() for p in self.params])
        work = [p.detach().to("cpu", torch.float64).clone() for p in self.params]
        bridge = DHTBridge(dht, loop or asyncio.get_running_loop(), self.trusted)
        self.averager = ParameterAverager(
            work, bridge, averaging_prefix(run_id), group_size, timeout, lambda: self._shared
        )

    def start(self) -> LearnerAveraging:
        logging.getLogger("hivemind.averaging.averager").setLevel(logging.CRITICAL)  # `round` logs failures itself
        self.averager.start_in_thread(self.timeout)
        return self

    def stop(self) -> None:
        self.averager.stop_thread(timeout=5.0)

    def bytes_per_round(self, group_size: int) -> int:
        """Bytes one member sends plus receives in a round of `group_size` (hivemind's butterfly all-reduce: its
        float64 parts out and their deltas back, the others' parts of its own share in and their deltas out)."""
        numel = sum(p.numel() for p in self.params)
        return 4 * 8 * numel * (group_size - 1) // max(1, group_size)

    def set_anchor(self, version: int) -> None:
        """The current parameters (published, or started from, as `version`) start the next interval."""
        if self.outer_lr == 1.0:
            return  # plain averaging needs no anchor
        self.anchor = [p.detach().to("cpu").clone() for p in self.params]
        digest = hashlib.blake2b(digest_size=16)
        for tensor in self.anchor:
            digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
        self.anchor_id, self.anchor_version = digest.hexdigest(), int(version)

    def share(self, version: int) -> None:
        """Record the parameters just published as `version`: what a joining learner downloads."""
        self._shared = ({"version": int(version)}, [p.detach().cpu().clone() for p in self.params])

    def round(self, version: int) -> RoundResult:
        """Average the parameters with the learners that show up within the timeout; on success they are
        overwritten in place with the group's mean and the result names the version all members adopt."""
        began = time.monotonic()
        with self.averager.get_tensors() as work:
            for buffer, param in zip(work, self.params):
                buffer.copy_(param.detach())
        # an anchor counts only while this learner has published nothing of its own since it was set
        anchor = self.anchor_id if self.anchor_id is not None and int(version) == self.anchor_version else None
        try:
            gathered = self.averager.step(
                gather={"version": int(version), "anchor": anchor, "outer_lr": self.outer_lr},
                timeout=self.timeout,
                allow_retries=False,
            )
            agreed, size = self._agreed_version(gathered)
        except Exception as exc:  # no group in time, a peer died mid-round, a stranger in the group...
            return self._finish(RoundResult(None, 0, time.monotonic() - began, f"{type(exc).__name__}: {exc}"))
        outer = agreed_outer_lr(list(gathered.values()), anchor, self.outer_lr)
        with self.averager.get_tensors() as work, torch.no_grad():
            for i, (buffer, param) in enumerate(zip(work, self.params)):
                if outer != 1.0:  # in float64, like the mean: every member computes the same bits
                    start = self.anchor[i].to(torch.float64)
                    buffer = start + outer * (buffer - start)
                param.copy_(buffer)
        self.set_anchor(agreed)
        return self._finish(RoundResult(agreed, size, time.monotonic() - began, outer_lr=outer))

    def _agreed_version(self, gathered: Any) -> tuple[int, int]:
        if not isinstance(gathered, dict) or len(gathered) < 2:
            raise RuntimeError("no group formed")
        if self.trusted and any(peer.to_base58() not in self.trusted for peer in gathered):
            raise PermissionError("a peer that is not one of trust.learner_keys joined the group")
        versions = [g.get("version") if isinstance(g, dict) else None for g in gathered.values()]
        valid = [v for v in versions if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
        if len(valid) < len(versions):
            raise ValueError(f"a group member gathered no valid version: {versions}")
        return max(valid) + 1, len(gathered)

    def _finish(self, result: RoundResult) -> RoundResult:
        self.last = result
        if result.version is None:
            self.failures += 1
            logger.warning(
                "averaging round failed after %.1f s (%s); training on locally", result.seconds, result.error
            )
        else:
            self.rounds += 1
        return result

    def load_from_peers(self) -> tuple[int, list[torch.Tensor]] | None:
        """(version, tensors) of another learner's last published state, or None (nobody answered, or what
        came does not fit these parameters)."""
        try:
            loaded = self.averager.load_state_from_peers(timeout=self.timeout)
        except Exception as exc:
            logger.warning("loading the state from another learner failed: %s", exc)
            return None
        if loaded is None:
            return None
        metadata, tensors = loaded
        version = metadata.get("version") if isinstance(metadata, dict) else None
        fits = len(tensors) == len(self.params) and all(t.shape == p.shape for t, p in zip(tensors, self.params))
        if not isinstance(version, int) or version < 0 or not fits:
            logger.warning("another learner's state does not fit this model (version %r); ignored", version)
            return None
        return version, list(tensors)
