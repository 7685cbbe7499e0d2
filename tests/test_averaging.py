"""Several learners' parameter averaging on hivemind's own averager: real p2pd daemons and DHT nodes on 127.0.0.1,
averagers running in this process (swarmnode.swarm.averaging)."""

from __future__ import annotations

import asyncio

import msgpack
import pytest
import torch
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import DHTRecord
from hivemind.utils import get_dht_time
from swarm_helpers import FAST_NET, LOOPBACK

from swarmnode.config import load_config
from swarmnode.identity import Identity
from swarmnode.protocol.codec import pack
from swarmnode.swarm.averaging import LearnerAveraging, agreed_outer_lr
from swarmnode.swarm.dht import SwarmDHT
from swarmnode.swarm.validator import SwarmValidator, averaging_keys, averaging_prefix

RUN = "avg.run"  # a '.' in the run id: hivemind's prefix may not hold one, the derived prefix does not


def cfg_with(*sets: str):
    return load_config(None, [*FAST_NET, f"run_id={RUN}", f"network.host_maddrs=[{LOOPBACK}]", *sets])


def _record(owner: Identity, key: str, payload: bytes, validator: SwarmValidator) -> DHTRecord:
    record = DHTRecord(
        key=DHTID.generate(source=key).to_bytes(),
        subkey=pack(owner.peer_id),
        value=pack(payload),
        expiration_time=get_dht_time() + 10,
    )
    return DHTRecord(record.key, record.subkey, validator.sign_value(record), record.expiration_time)


def test_the_averagers_records_pass_the_runs_validator_and_nothing_else_does():
    owner = Identity.generate()
    mine = SwarmValidator(RUN, owner)
    assert "." not in averaging_prefix(RUN) and averaging_prefix(RUN) != averaging_prefix("other")
    for key in averaging_keys(RUN):
        for value in (True, False, 1.5, None):
            assert mine.validate(_record(owner, key, msgpack.packb(value), mine))
        assert not mine.validate(_record(owner, key, msgpack.packb({"evil": "x" * 4}), mine))
        assert not SwarmValidator("other", owner).validate(_record(owner, key, msgpack.packb(True), mine))


async def _two_learners():
    """Two DHT nodes of one run (the second joined through the first) and their identities."""
    ids = [Identity.generate(), Identity.generate()]
    first = await SwarmDHT.create(cfg_with(), ids[0])
    boot = str((await first.p2p.get_visible_maddrs())[0])
    second = await SwarmDHT.create(cfg_with(f"network.initial_peers=[{boot}]"), ids[1])
    return ids, [first, second]


async def _close(averagers: list[LearnerAveraging], dhts: list[SwarmDHT]) -> None:
    for averager in averagers:
        await asyncio.to_thread(averager.stop)
    for dht in reversed(dhts):
        await dht.shutdown()


def _with_whole_rounds(scenario, rounds_of, attempts: int = 3):
    """Run `scenario` again (fresh learners) while one of its rounds failed: on a loaded machine hivemind now and
    then loses a part of a round's result, and such a round fails at the member it hit (tested below)."""
    for _ in range(attempts):
        out = asyncio.run(scenario())
        if all(r.version is not None for r in rounds_of(out)):
            return out
    return out


async def _averaging_scenario():
    ids, dhts = await _two_learners()
    torch.manual_seed(0)
    params = [[torch.randn(4096), torch.randn(64, 33)] for _ in dhts]
    params[1][0][:100] = -params[0][0][:100] + 1e-7  # means near zero: where a float32 delta would round
    expected = [(a.double() + b.double()) / 2 for a, b in zip(*params)]
    averagers = [LearnerAveraging(p, d, RUN, group_size=2, timeout=30) for p, d in zip(params, dhts)]
    try:
        for averager in averagers:
            await asyncio.to_thread(averager.start)
        first, second = await asyncio.gather(
            asyncio.to_thread(averagers[0].round, 5), asyncio.to_thread(averagers[1].round, 9)
        )
        identical = all(torch.equal(a, b) for a, b in zip(*params))
        error = max(float((a.double() - e).abs().max()) for a, e in zip(params[0], expected))
        averagers[0].share(10)
        loaded = await asyncio.to_thread(averagers[1].load_from_peers)
        return first, second, identical, error, loaded, [p.clone() for p in params[0]]
    finally:
        await _close(averagers, dhts)


@pytest.mark.usefixtures("starts_processes")
def test_two_learners_average_to_identical_weights_and_agree_on_the_version():
    first, second, identical, error, loaded, shared = _with_whole_rounds(_averaging_scenario, lambda o: o[:2])
    assert first.version == second.version == 10  # max(5, 9) + 1, at both
    assert first.group_size == second.group_size == 2
    assert identical  # bit for bit: both publish the same chunks
    assert error < 1e-6  # and it is the mean
    assert loaded is not None and loaded[0] == 10  # a late joiner gets the last shared version
    assert all(torch.equal(a, b) for a, b in zip(loaded[1], shared))


async def _outer_step_scenario():
    ids, dhts = await _two_learners()
    torch.manual_seed(1)
    params = [[torch.randn(2048), torch.randn(16, 9)] for _ in dhts]  # different starts: anchors differ
    averagers = [LearnerAveraging(p, d, RUN, group_size=2, timeout=30, outer_lr=2.0) for p, d in zip(params, dhts)]

    async def both(versions):
        return await asyncio.gather(*(asyncio.to_thread(a.round, v) for a, v in zip(averagers, versions)))

    try:
        for averager in averagers:
            await asyncio.to_thread(averager.start)
        plain = await both([0, 0])  # anchors differ: the plain mean, which both take as their next anchor
        mean = [p.clone() for p in params[0]]
        deltas = [[torch.randn_like(t) * 0.01 for t in mine] for mine in params]
        for mine, delta in zip(params, deltas):  # local steps
            for t, d in zip(mine, delta):
                t.add_(d)
        stepped = await both([plain[0].version] * 2)
        after_step = [[p.clone() for p in mine] for mine in params]
        for mine, delta in zip(params, deltas):
            for t, d in zip(mine, delta):
                t.add_(d)
        own = await both([stepped[0].version + 3, stepped[1].version])  # the first published versions alone
        return plain, mean, deltas, stepped, after_step, own, params
    finally:
        await _close(averagers, dhts)


@pytest.mark.usefixtures("starts_processes")
def test_the_outer_step_adds_up_the_learners_updates_from_a_shared_anchor_only():
    plain, mean, deltas, stepped, after_step, own, params = _with_whole_rounds(
        _outer_step_scenario, lambda o: [*o[0], *o[3], *o[5]]
    )
    assert [r.outer_lr for r in plain] == [1.0, 1.0]  # different anchors: plain mean
    assert [r.outer_lr for r in stepped] == [2.0, 2.0] and stepped[0].version == stepped[1].version
    assert all(torch.equal(a, b) for a, b in zip(*after_step))  # bit-identical at both learners
    for got, start, d0, d1 in zip(after_step[0], mean, *deltas):  # anchor + 2 * (mean - anchor) = anchor + sum
        assert torch.allclose(got.double(), start.double() + d0.double() + d1.double(), atol=1e-6)
    assert [r.outer_lr for r in own] == [1.0, 1.0]  # one published on its own since: no shared anchor
    assert all(torch.equal(a, b) for a, b in zip(*params))


def test_the_outer_step_needs_the_same_anchor_and_step_size_at_every_member():
    def member(anchor, outer=2.0):
        return {"version": 3, "anchor": anchor, "outer_lr": outer}

    assert agreed_outer_lr([member("a"), member("a")], "a", 2.0) == 2.0
    assert agreed_outer_lr([member("a"), member("b")], "a", 2.0) == 1.0  # another anchor
    assert agreed_outer_lr([member("a"), member(None)], "a", 2.0) == 1.0  # one published on its own
    assert agreed_outer_lr([member("a"), member("a", 3.0)], "a", 2.0) == 1.0  # configured differently
    assert agreed_outer_lr([member("a"), {"version": 3}], "a", 2.0) == 1.0  # an older learner: no anchor sent
    assert agreed_outer_lr([member(None), member(None)], None, 2.0) == 1.0


async def _partial_round_scenario():
    ids, dhts = await _two_learners()
    params = [[torch.full((300_000,), float(i))] for i in range(2)]  # 2.4 MB each as float64: several parts
    averagers = [LearnerAveraging(p, d, RUN, group_size=2, timeout=6) for p, d in zip(params, dhts)]
    faulty = averagers[1].averager
    serve = faulty.rpc_aggregate_part

    async def one_part_then_drop(stream, context):  # a peer that dies after sending one averaged part back
        async for message in serve(stream, context):
            yield message
            raise ConnectionError("dropped mid-round")

    faulty.rpc_aggregate_part = one_part_then_drop  # registered as the handler when the averager starts
    try:
        for averager in averagers:
            await asyncio.to_thread(averager.start)
        results = await asyncio.gather(*(asyncio.to_thread(a.round, 3) for a in averagers))
        return results, [p[0].clone() for p in params]
    finally:
        await _close(averagers, dhts)


@pytest.mark.usefixtures("starts_processes")
def test_a_round_whose_averaged_parts_did_not_all_come_back_changes_nothing():
    (healthy, faulty), (mine, theirs) = asyncio.run(_partial_round_scenario())
    # the healthy learner got only part of the group's result back: its round fails and its weights stay its own
    assert healthy.version is None and "did not come back" in healthy.error
    assert torch.equal(mine, torch.zeros(300_000))
    # whatever the other member made of it, no two members publish one version with different weights
    if faulty.version is not None:
        assert not torch.equal(mine, theirs)  # it alone holds the agreed version


async def _stranger_scenario():
    ids, dhts = await _two_learners()
    params = [[torch.full((256,), float(i))] for i in range(2)]
    trusted = [ids[0].peer_id]  # the first learner trusts itself only: the second is a stranger to it
    averagers = [
        LearnerAveraging(params[0], dhts[0], RUN, group_size=2, timeout=6, trusted=trusted),
        LearnerAveraging(params[1], dhts[1], RUN, group_size=2, timeout=6),
    ]
    try:
        for averager in averagers:
            await asyncio.to_thread(averager.start)
        mine, _ = await asyncio.gather(
            asyncio.to_thread(averagers[0].round, 1), asyncio.to_thread(averagers[1].round, 1)
        )
        alone = await asyncio.to_thread(averagers[0].round, 2)  # nobody else looks for a group now
        return mine, alone, params[0][0].clone(), averagers[0].failures
    finally:
        await _close(averagers, dhts)


@pytest.mark.usefixtures("starts_processes")
def test_a_round_with_a_stranger_or_with_nobody_changes_nothing_and_counts_a_failure():
    mine, alone, weights, failures = asyncio.run(_stranger_scenario())
    assert mine.version is None and alone.version is None
    assert torch.equal(weights, torch.zeros(256))  # the stranger's ones were not taken
    assert failures == 2
