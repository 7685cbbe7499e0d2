"""A sampler that lies about behaviour log-probs, as a hostile peer runs it against a live learner: it samples real
groups with the run's model (its own copy, never updated), adds `shift` nats to every claimed log-prob (at most 0, as
the wire format requires) and claims the version `behind` versions below the newest one the learner's acks name.
A real p2pd in the caller's process; every push is acknowledged by the learner like an honest sampler's.

`shaped_liars`: liars whose only lie is the shape of their log-probs (`shaped_lies`): each pulls the honest
sampler's newest groups (what any peer may pull), tells one shaped lie about their log-probs, signs them with its
own key and pushes them, claiming the version they were sampled at (so everything but the lie is exact)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from pathlib import Path

from group_helpers import copy_of
from hivemind.p2p import P2P, PeerID
from shaped_lies import lie as shaped_lie

from swarmnode.config import NodeConfig
from swarmnode.identity import Identity
from swarmnode.protocol.codec import pack
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits
from swarmnode.sampler.build import build_engine
from swarmnode.sampler.loop import SamplerLoop
from swarmnode.swarm.frames import read_control, write_frame
from swarmnode.swarm.rollout_push import pull_protocol, push_protocol
from swarmnode.tasks import build_task


def lying_groups(
    cfg: NodeConfig, run_id: str, liar: Identity, lineage: str, n: int, shift: float
) -> list[RolloutGroup]:
    """`n` real groups of the run's task and model, their log-probs shifted by `shift` (version set on push)."""
    cfg = cfg.model_copy(update={"run_id": run_id})
    out: list[RolloutGroup] = []
    sampler = SamplerLoop(
        build_engine(cfg), build_task(cfg.task), cfg.sampler, cfg.run_id, liar, out.append, lineage=lineage, seed=7
    )
    while len(out) < n:
        sampler.step()
    return [
        RolloutGroup.create(
            identity=liar,
            run_id=g.run_id,
            prompt_id=g.prompt_id,
            prompt_tokens=g.prompt_tokens,
            completions=g.completions,
            temperature=g.temperature,
            rewards=g.rewards,
            logprobs=[[min(0.0, x + shift) for x in lp] for lp in g.logprobs],
            policy_version=0,
            lineage=lineage,
        )
        for g in out[:n]
    ]


def claiming(group: RolloutGroup, liar: Identity, version: int) -> RolloutGroup:
    """`group` re-signed claiming `version`."""
    return copy_of(group, liar, policy_version=max(0, version))


async def push_one(p2p: P2P, learner: PeerID, run_id: str, frame: bytes) -> dict:
    """Push one encoded group on a new stream; the learner's ack (a status of "closed (...)" when it closed)."""
    try:
        _, reader, writer = await asyncio.wait_for(p2p.call_binary_stream_handler(learner, push_protocol(run_id)), 10)
        try:
            await write_frame(writer, frame)
            return await asyncio.wait_for(read_control(reader), 30) or {}
        finally:
            writer.close()
    except Exception as exc:  # a ban closes the stream
        return {"status": f"closed ({type(exc).__name__})"}


async def lie(
    tmp: Path,
    run_id: str,
    learner_id: str,
    learner_addr: str,
    groups: list[RolloutGroup],
    liar: Identity,
    behind: int,
    pause: float = 0.2,
) -> Counter[str]:
    """Push `groups` one by one, each claiming (newest acked version - `behind`); the acks' statuses."""
    key = tmp / f"liar-{liar.peer_id[-8:]}.key"
    key.write_bytes(liar.libp2p_key_bytes())
    p2p = await P2P.create(
        identity_path=str(key),
        host_maddrs=["/ip4/127.0.0.1/tcp/0"],
        nat_port_map=False,
        auto_nat=False,
        check_if_identity_free=False,
        startup_timeout=120,
        initial_peers=[f"{learner_addr}/p2p/{learner_id}"],
    )
    learner, statuses, newest = PeerID.from_base58(learner_id), Counter(), None
    try:
        for group in groups:
            version = behind if newest is None else newest - behind  # the first claim learns the version
            ack = await push_one(p2p, learner, run_id, claiming(group, liar, version).encode())
            statuses[ack.get("status", "none")] += 1
            newest = int(ack["v"]) if "v" in ack else newest
            await asyncio.sleep(pause)
    finally:
        with contextlib.suppress(Exception):
            await p2p.shutdown()
    return statuses


async def _start(tmp: Path, who: Identity, peer: str) -> P2P:
    key = tmp / f"peer-{who.peer_id[-8:]}.key"
    key.write_bytes(who.libp2p_key_bytes())
    for attempt in range(3):  # a loaded machine: the daemon may not reach its peer in time
        try:
            return await P2P.create(
                identity_path=str(key),
                host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                nat_port_map=False,
                auto_nat=False,
                check_if_identity_free=False,
                startup_timeout=120,
                initial_peers=[peer],
            )
        except Exception:
            if attempt == 2:
                raise
            await asyncio.sleep(2)
    raise AssertionError("unreachable")


async def pull_groups(p2p: P2P, run_id: str, sampler_id: str, limit: int = 16) -> list[RolloutGroup]:
    """The honest sampler's newest groups from its pull ring."""
    _, reader, writer = await asyncio.wait_for(
        p2p.call_binary_stream_handler(PeerID.from_base58(sampler_id), pull_protocol(run_id)), 10
    )
    out = []
    try:
        await write_frame(writer, pack({"since": 0.0, "limit": limit}))
        while n := int.from_bytes(await asyncio.wait_for(reader.readexactly(8), 30), "big"):
            out.append(RolloutGroup.decode(await reader.readexactly(n), RolloutLimits(vocab_size=1 << 20)))
        with contextlib.suppress(ConnectionError):  # the sampler may close first: what was read is read
            await write_frame(writer, pack({"op": "bye"}))
    finally:
        writer.close()
    return out


async def shaped_liars(
    tmp: Path, run_id: str, learner: str, sampler: str, kinds: list[str], per_kind: int = 4
) -> dict[str, dict]:
    """For each lie of `kinds`, a new key pushing `per_kind` of the honest sampler's newest groups with that lie
    told about their log-probs; `learner` and `sampler` are "<addr>/p2p/<peer id>". Per kind: the liar's peer id
    and its acks' statuses."""
    learner_id, sampler_id = learner.rpartition("/p2p/")[2], sampler.rpartition("/p2p/")[2]
    puller = await _start(tmp, Identity.generate(), sampler)
    out: dict[str, dict] = {}
    try:
        for kind in kinds:
            liar = Identity.generate()
            p2p = await _start(tmp, liar, learner)
            statuses: Counter[str] = Counter()
            try:
                honest = (await pull_groups(puller, run_id, sampler_id))[-per_kind:]
                for i, g in enumerate(honest):
                    told = RolloutGroup.create(
                        identity=liar,
                        run_id=g.run_id,
                        prompt_id=g.prompt_id,
                        prompt_tokens=g.prompt_tokens,
                        completions=g.completions,
                        temperature=g.temperature,
                        rewards=g.rewards,
                        logprobs=shaped_lie(kind, g.logprobs, g.rewards, seed=i),
                        policy_version=g.policy_version,
                        lineage=g.lineage,
                    )
                    for _ in range(200):  # "full" is backpressure: resent 50 ms later, as an honest sender does
                        ack = await push_one(p2p, PeerID.from_base58(learner_id), run_id, told.encode())
                        if ack.get("status") != "full":
                            break
                        await asyncio.sleep(0.05)
                    statuses[ack.get("status", "none")] += 1
            finally:
                with contextlib.suppress(Exception):
                    await p2p.shutdown()
            out[kind] = {"peer_id": liar.peer_id, "statuses": dict(statuses)}
    finally:
        with contextlib.suppress(Exception):
            await puller.shutdown()
    return out


async def patient_liar(
    tmp: Path,
    run_id: str,
    learner: str,
    sampler: str,
    honest: int,
    lies: int,
    kind: str = "shaped:0.5",
    between: float = 0.0,
    drained=None,
) -> dict:
    """One key that first earns clean checks, then lies: it pushes `honest` of the honest sampler's newest groups
    unchanged (re-signed under its key, claiming the version they were sampled at), waits for `drained()` (if
    given: its honest groups are trained), then pushes `lies` such groups with lie `kind` told. Its peer id, the
    acks' statuses of each phase, and the time the lies began (`time.time()`)."""
    import time

    learner_id, sampler_id = learner.rpartition("/p2p/")[2], sampler.rpartition("/p2p/")[2]
    me = Identity.generate()
    puller, p2p = await _start(tmp, Identity.generate(), sampler), await _start(tmp, me, learner)
    target, pushed = PeerID.from_base58(learner_id), set()
    phases: dict[str, Counter[str]] = {"honest": Counter(), "lies": Counter()}
    lies_began = None

    async def push(phase: str, n: int, told: str | None) -> None:
        i = tries = 0
        while i < n and tries < 5 * n:  # n accepted, or given up (a banned key's pushes are refused)
            try:
                fresh = [g for g in await pull_groups(puller, run_id, sampler_id) if g.group_id not in pushed]
            except Exception:  # a busy sampler reset the pull stream: ask again
                fresh = []
                tries += 1
            if not fresh:
                await asyncio.sleep(0.2)
                continue
            for g in fresh:
                if i >= n:
                    break
                pushed.add(g.group_id)
                logprobs = g.logprobs if told is None else shaped_lie(told, g.logprobs, g.rewards, seed=i)
                group = RolloutGroup.create(
                    identity=me,
                    run_id=g.run_id,
                    prompt_id=g.prompt_id,
                    prompt_tokens=g.prompt_tokens,
                    completions=g.completions,
                    temperature=g.temperature,
                    rewards=g.rewards,
                    logprobs=logprobs,
                    policy_version=g.policy_version,
                    lineage=g.lineage,
                )
                for _ in range(200):  # "full" is backpressure: resent 50 ms later, as an honest sender does
                    ack = await push_one(p2p, target, run_id, group.encode())
                    if ack.get("status") != "full":
                        break
                    await asyncio.sleep(0.05)
                phases[phase][ack.get("status", "none")] += 1
                tries += 1
                i += ack.get("status") == "ok"
                await asyncio.sleep(between if ack.get("status") == "ok" else 0.2)

    try:
        await push("honest", honest, None)
        if drained is not None:
            await asyncio.to_thread(drained, me.peer_id)
        lies_began = time.time()
        await push("lies", lies, kind)
    finally:
        for daemon in (p2p, puller):
            with contextlib.suppress(Exception):
                await daemon.shutdown()
    return {
        "peer_id": me.peer_id,
        "kind": kind,
        "lies_began": lies_began,
        **{phase: dict(counts) for phase, counts in phases.items()},
    }
