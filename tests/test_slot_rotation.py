"""Weight-server slots that no stranger holds forever (swarm/weights/slots.py).

The rules alone first (a slot table, no daemons). Then the attack of issue 47 in real processes: 33 throwaway keys
each hold 4 streams on both holders of a version, a learner and an honest sampler, asking for a manifest every 2 s
(never idle in the old sense); a new sampler (a fresh key and daemon, a stranger to both) fetches its first version
from them, and an honest stranger that already fetched before keeps fetching. Each is timed against the same fetch
from an unflooded copy of both holders (the same stores served by two more daemons), alternating, best of the
pairs (the other agents' load on a shared machine hits both sides alike). A refused or rotated-out stream costs
the fetch seconds, not tenths: without rotation the new sampler gets no weights at all."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
from pathlib import Path

import pytest
import torch
from hivemind.p2p import P2P
from test_slot_flood import flood_ready, run_flooded, start_flood
from weights_helpers import RUN, daemons

from swarmnode.identity import Identity
from swarmnode.swarm.weights import WeightFetcher, WeightServer, WeightStore
from swarmnode.swarm.weights.slots import SlotTable, address_group


class Stream:
    """What a slot closes when it is taken over."""

    closed = False

    def close(self) -> None:
        self.closed = True


def table(**kw) -> SlotTable:
    return SlotTable(
        **{"max_total": 16, "max_per_peer": 8, "stranger_per_peer": 4, "max_strangers": 8, "evict_after": 60.0, **kw}
    )


def test_a_new_stranger_key_takes_a_slot_from_the_key_holding_the_most():
    t = table()
    flood = [t.admit(f"f{k}", "1.1.1.1", False, Stream()) for k in (0, 1) for _ in range(4)]
    assert all(flood) and t.strangers == 8
    assert t.admit("f0", "1.1.1.1", False, Stream()) is None  # its own cap
    mine = [t.admit("new", "1.1.1.1", False, Stream()) for _ in range(4)]
    # 1, 2 and 3 are fairer than the flood's 4, 3 and 3; a 4th would only swap counts with a busy key
    assert [s is not None for s in mine] == [True, True, False, False]
    assert t.by_peer == {"f0": 3, "f1": 3, "new": 2} and sum(s.evicted and s.writer.closed for s in flood) == 2
    assert t.admit("f0", "1.1.1.1", False, Stream()) is None  # a flood key cannot win it back


def test_an_address_of_many_keys_gives_way_to_another_address():
    t = table()
    for k in range(8):
        assert t.admit(f"f{k}", "1.1.1.1", False, Stream())
    # one address's throwaway keys share that address's slots: the other address gets up to half
    got = [t.admit("home", "2.2.2.2", False, Stream()) for _ in range(4)]
    assert all(got) and t.strangers_by_address == {"1.1.1.1": 4, "2.2.2.2": 4}
    assert t.admit("f9", "1.1.1.1", False, Stream()) is None  # 5 against 3: not fairer


def test_idle_slots_of_an_equal_share_rotate_and_trusted_peers_take_one_at_once():
    t = table(evict_after=0.0)
    for k in range(2):
        for _ in range(4):
            t.admit(f"f{k}", "1.1.1.1", False, Stream())
    # the 3rd rotates out an idle slot of a key that keeps as many (3); a 4th would hold more than the others
    assert [t.admit("new", "1.1.1.1", False, Stream()) is not None for _ in range(4)] == [True, True, True, False]
    t = table(max_total=8)
    for k in range(2):
        for _ in range(4):
            t.admit(f"f{k}", "1.1.1.1", False, Stream())
    assert t.admit("learner", "3.3.3.3", True, Stream()) is not None and len(t.slots) == 8


def test_address_groups():
    assert address_group("k", "/ip4/1.2.3.4/tcp/5") == "1.2.3.4"
    assert address_group("k", "/ip6/2001:db8::1/tcp/5") == "2001:db8::/64"
    assert address_group("k", "/ip4/5.6.7.8/tcp/1/p2p/QmRelay/p2p-circuit") == "peer:k"  # relayed: its key
    assert address_group("k", "") == "peer:k"


KEYS, STREAMS, EVERY = 33, 4, 2.0  # issue 47: 132 never-idle streams on every holder, more than the 128 for strangers
MIN_PAIRS, MAX_PAIRS = 3, 12
NEW_RATIO, HONEST_RATIO = 0.5, 0.8  # a new sampler within 2x its unflooded time; an honest stranger >= 0.8x


def state() -> dict[str, torch.Tensor]:
    """16 MiB: 16 chunks of 1 MiB."""
    return {"w": torch.randn(4 << 20, generator=torch.Generator().manual_seed(2))}


async def fetch_seconds(p2p: P2P, where: Path, learner: Identity, holders) -> float:
    fetcher = WeightFetcher(p2p, WeightStore(where, RUN, chunk_bytes=1 << 20), [learner.peer_id], layout=None)
    try:
        await asyncio.wait_for(fetcher.fetch([h.peer_id for h in holders], 1), 120)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return fetcher.last_stats.seconds


async def new_sampler_seconds(addrs: list[str], where: Path, learner: Identity, holders) -> float:
    """A fresh key and daemon that knows the holders' addresses fetches its first version: its seconds."""
    newcomer = await P2P.create(
        host_maddrs=["/ip4/127.0.0.1/tcp/0"], initial_peers=addrs, nat_port_map=False, auto_nat=False
    )
    try:
        return await fetch_seconds(newcomer, where, learner, holders)
    finally:
        with contextlib.suppress(Exception):
            await newcomer.shutdown()


def best_ratio(quiet: list[float], flooded: list[float]) -> float:
    return min(quiet) / min(flooded)


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.usefixtures("starts_processes")
def test_never_idle_strangers_leave_a_new_sampler_its_first_version(tmp_path):
    learner = Identity.generate()
    flood: dict = {}

    async def scenario():
        async with daemons(5) as (lf, sf, lq, sq, honest):
            ls, ss = (WeightStore(tmp_path / n, RUN, chunk_bytes=1 << 20) for n in ("learner", "sampler"))
            for store in (ls, ss):  # the honest sampler holds the version it fetched
                store.publish(1, state(), learner)
            trusted = lambda peer: peer == learner.peer_id  # noqa: E731 (only the learner's key, as on a sampler)
            flooded = [await WeightServer(store, trusted=trusted).start(p2p) for store, p2p in ((ls, lf), (ss, sf))]
            for store, p2p in ((ls, lq), (ss, sq)):
                await WeightServer(store, trusted=trusted).start(p2p)
            addrs = [f"{(await p.get_visible_maddrs())[0]}/p2p/{p.peer_id}" for p in (lf, sf, lq, sq)]
            flood["proc"], ready = start_flood(tmp_path, addrs[0], KEYS, STREAMS, EVERY, [addrs[1]], "manifest")
            await flood_ready(flood["proc"], ready)
            for _ in range(60):  # the flood fills every stranger slot on both holders
                held = min(s.stranger_streams for s in flooded)
                if held == flooded[0].max_stranger_streams:
                    break
                await asyncio.sleep(0.5)
            assert held == flooded[0].max_stranger_streams, held
            for holders in ((lq, sq), (lf, sf)):  # connections and page cache warm
                await fetch_seconds(honest, tmp_path / "warm", learner, holders)
            new = {"quiet": [], "flooded": []}
            old = {"quiet": [], "flooded": []}
            for i in range(MAX_PAIRS):
                for side, holders in (("quiet", (lq, sq)), ("flooded", (lf, sf))):
                    new[side].append(await new_sampler_seconds(addrs, tmp_path / f"n{side}{i}", learner, holders))
                    old[side].append(await fetch_seconds(honest, tmp_path / f"h{side}{i}", learner, holders))
                held = min(held, *(s.stranger_streams for s in flooded))
                if i + 1 >= MIN_PAIRS and best_ratio(**new) >= NEW_RATIO and best_ratio(**old) >= HONEST_RATIO:
                    break
            return new, old, held, flooded

    (new, old, held, servers), counts = run_flooded(scenario(), flood, tmp_path)
    print(
        f"slot rotation: new sampler {best_ratio(**new):.2f}x its unflooded speed (best of {len(new['quiet'])}: "
        f"{min(new['quiet']):.2f} s unflooded, {min(new['flooded']):.2f} s flooded; medians "
        f"{statistics.median(new['quiet']):.2f} and {statistics.median(new['flooded']):.2f} s); honest stranger "
        f"{best_ratio(**old):.2f}x ({min(old['quiet']):.2f} and {min(old['flooded']):.2f} s; medians "
        f"{statistics.median(old['quiet']):.2f} and {statistics.median(old['flooded']):.2f} s); the flood held 128, "
        f"at least {held} streams, {counts}; evicted {[s.streams_evicted for s in servers]}, refused "
        f"{[s.streams_refused for s in servers]}"
    )
    assert counts["keys"] == KEYS and counts["haves"] > 0  # the flood kept asking for manifests
    # it filled every stranger slot before the fetches (asserted above), and the new samplers' streams took slots
    # from it (its streams also close after 20 s without chunks and reopen a second later: `held` dips then)
    assert all(s.streams_evicted > 0 for s in servers), [s.streams_evicted for s in servers]
    assert best_ratio(**new) >= NEW_RATIO, new
    assert best_ratio(**old) >= HONEST_RATIO, old
