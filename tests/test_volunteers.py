"""Public names, the contributors board and the run page, in-process: names refused at the source and mended by
readers (control characters, markup, 10,000 characters), the tally's bounds and durability, a forged board
refused, the page's escaping and curves, the server's read-only answers and its rate limit per client."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from health_fixtures import simulated_records

from swarmnode.board.curves import MAX_POINTS, Curves
from swarmnode.board.durable import BOARD_FILE, LearnerBoard
from swarmnode.board.own_line import own_line_text
from swarmnode.board.record import BOARD_TOP, MAX_BOARD_BYTES, BoardRecord, CurveRecord
from swarmnode.board.tally import MAX_REASON_CHARS, MAX_REASONS, ContributorTally
from swarmnode.config import load_config
from swarmnode.errors import ExitCode, UsageError
from swarmnode.identity import Identity
from swarmnode.observe.board_view import curves_section, merge_boards
from swarmnode.observe.status import status_document
from swarmnode.observe.status_schema import validate
from swarmnode.protocol.codec import InvalidRecord, pack, sign_fields
from swarmnode.protocol.peer import PeerRecord
from swarmnode.protocol.public_name import NamePolicy, check_public_name, shown_name
from swarmnode.web.page import render
from swarmnode.web.server import PageServer

HOSTILE = {
    "control": "eve\x1b[2J\x07\u202etxt",
    "markup": "<script>alert(1)</script>[bold red]x[/]",
    "long": "A" * 10_000,
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_name_is_refused_at_the_source_and_mended_by_readers(kind):
    name = HOSTILE[kind]
    with pytest.raises(UsageError) as refused:
        check_public_name(name, NamePolicy())
    assert refused.value.exit_code == ExitCode.USAGE and "\n" not in str(refused.value)
    shown = shown_name(name, NamePolicy())
    assert shown.changed and len(shown.text) <= 32
    assert not any(c in shown.text for c in "<>[]/\x1b\x07\u202e")


def test_names_the_policy_allows_pass_unchanged_and_a_run_may_allow_none():
    assert check_public_name("Zoë's GPU #2 (東京)", NamePolicy()) == "Zoë's GPU #2 (東京)"
    assert shown_name("Zoë's GPU", NamePolicy()).changed is False
    with pytest.raises(UsageError, match="charset"):
        check_public_name("Zoë", NamePolicy(charset="ascii"))
    with pytest.raises(UsageError, match="allowed is false"):
        check_public_name("alice", NamePolicy(allowed=False))
    assert shown_name("alice", NamePolicy(allowed=False)).text == ""
    assert check_public_name(None, NamePolicy(allowed=False)) == ""


def test_a_name_travels_in_the_peer_record_and_a_record_without_one_is_unchanged():
    me = Identity.generate()
    named = PeerRecord.create(me, role="sampler", name="alice")
    assert PeerRecord.decode(named.encode()).name == "alice"
    plain = PeerRecord.create(me, role="sampler")
    assert b"name" not in plain.encode()  # what nodes before public names wrote and read
    body = {**named._fields(), "name": "A" * 10_000}  # a hostile writer signs a huge name itself
    with pytest.raises(InvalidRecord, match="name"):
        PeerRecord.decode(pack({**body, "signature": sign_fields(body, me)}))


def test_the_status_document_shows_names_mended_and_counts_them():
    cfg = load_config("tiny-cpu", ["run_id=sim-run"])
    records = simulated_records(4)
    body = {**records[2]._fields(), "name": HOSTILE["markup"]}
    me = Identity.generate()
    body["peer_id"] = me.peer_id
    hostile = PeerRecord.decode(pack({**body, "signature": sign_fields(body, me)}))
    doc = status_document(cfg, [*records, hostile])
    assert doc["names_mended"] == 1
    assert "<" not in next(p["name"] for p in doc["peers"] if p["peer_id"] == me.peer_id)
    validate(doc)


def _step(t: float, ids: list[str], groups: int = 2, tokens: int = 16, refused=None) -> dict:
    return {
        "step": int(t),
        "time": t,
        "step_time": 1.0,
        "sampler_ids": ids,
        "sampler_valid": [groups] * len(ids),
        "sampler_tokens": [tokens] * len(ids),
        "sampler_refused": refused or {},
        "reward_mean": t / 100,
        "kl": 0.01,
        "staleness_mean": 1.0,
        "trained": 1.0,
    }


def test_the_tally_survives_a_restart_and_a_damaged_file_is_set_aside(tmp_path):
    a, b = Identity.generate().peer_id, Identity.generate().peer_id
    board = LearnerBoard.load(tmp_path)
    for t in range(1, 11):
        board.add_step(_step(1000.0 + t, [a, b], refused={b: {"eval_prompt": 1}} if t == 5 else None))
    board.add_step({**_step(1011.0, [a]), "trained": 0.0})  # an untrained step: its groups do not count
    board.save()
    again = LearnerBoard.load(tmp_path)
    assert (again.tally.entries[a].groups, again.tally.entries[a].tokens) == (20, 160)
    assert again.tally.entries[b].refused == {"eval_prompt": 1}
    assert again.tally.entries[a].first == 1001.0 and again.tally.entries[a].last == 1010.0
    assert again.curves.series()["step"] == board.curves.series()["step"]
    (tmp_path / BOARD_FILE).write_text('{"tally": [')  # a torn write by another tool
    damaged = LearnerBoard.load(tmp_path)
    assert damaged.tally.damaged == 1 and damaged.tally.groups == 0
    assert (tmp_path / f"{BOARD_FILE}.damaged").exists()


def test_the_tally_and_its_record_stay_bounded_whatever_the_keys():
    tally = ContributorTally(max_keys=100)
    for i in range(1000):  # a flood of throwaway keys, each refused once; a few honest ones with work
        tally.refuse(f"12D3KooWthrowaway{i:05d}", "invalid")
    honest = [Identity.generate().peer_id for _ in range(3)]
    tally.add_step(_step(1.0, honest, groups=5))
    assert len(tally.entries) == 100 and tally.samplers == 1003 and tally.refused == 1000
    assert {k for k, _ in tally.top(3)} == set(honest)
    worst = ContributorTally()
    for i in range(500):  # every line at its largest: many reasons of the longest length
        key = Identity.generate().peer_id if i < BOARD_TOP else f"12D3KooWk{i:06d}"
        for r in range(MAX_REASONS + 3):
            worst.refuse(key, f"{r:02d}" + "x" * MAX_REASON_CHARS, 2**40)
        worst.add_step(_step(1.0 + i, [key], groups=2**40, tokens=2**50))
    record = BoardRecord.of(worst, Identity.generate(), "run")
    assert len(record.encode()) <= MAX_BOARD_BYTES and 0 < len(record.entries) <= BOARD_TOP
    assert BoardRecord.decode(record.encode()).rest()["samplers"] == 500 - len(record.entries)


def test_the_curves_reach_back_to_the_first_step_in_bounded_points():
    curves = Curves()
    for step in range(1, 20_001):
        curves.add(_step(float(step), ["x"], groups=8))
    series = curves.series()
    assert len(series["step"]) <= MAX_POINTS and series["step"][0] <= curves.span and series["step"][-1] == 20_000
    assert series["groups_per_s"][-1] == pytest.approx(8.0)
    assert series["heldout_reward"] == [None] * len(series["step"])  # no held-out evaluation in these steps
    record = CurveRecord.of(curves, Identity.generate(), "run")
    assert CurveRecord.decode(record.encode()).series == record.series


def test_a_forged_board_is_refused():
    learner, forger = Identity.generate(), Identity.generate()
    tally = ContributorTally()
    tally.add_step(_step(1.0, [forger.peer_id], groups=10**9))
    forged = BoardRecord.of(tally, forger, "run")
    forged.learner = learner.peer_id  # claims to be the learner's board, signed by another key
    with pytest.raises(InvalidRecord, match="signature"):
        BoardRecord.decode(forged.encode())


def test_the_validator_refuses_a_board_under_a_learner_key_written_by_another():
    import msgpack
    from hivemind.dht.routing import DHTID
    from hivemind.dht.validation import DHTRecord
    from hivemind.utils import get_dht_time

    from swarmnode.swarm.validator import BOARD_LABEL, SwarmValidator, board_key, owned_subkey

    learner, forger = Identity.generate(), Identity.generate()
    board = BoardRecord.of(ContributorTally(), forger, "run")

    def record(key_owner: str) -> DHTRecord:
        unsigned = DHTRecord(
            key=DHTID.generate(source=board_key("run", key_owner)).to_bytes(),
            subkey=msgpack.packb(owned_subkey(forger.peer_id, BOARD_LABEL)),
            value=msgpack.packb(board.encode(), use_bin_type=True),
            expiration_time=get_dht_time() + 30,
        )
        value = SwarmValidator("run", forger).sign_value(unsigned)
        return DHTRecord(unsigned.key, unsigned.subkey, value, unsigned.expiration_time)

    validator = SwarmValidator("run", Identity.generate())
    assert validator.validate(record(forger.peer_id))  # its own key: stored, but no reader believes it
    assert not validator.validate(record(learner.peer_id))  # under the learner's key: refused, counted
    assert validator.rejected == 1


def _doc_with_board() -> dict:
    cfg = load_config("tiny-cpu", ["run_id=sim-run"])
    doc = status_document(cfg, simulated_records(5))
    learner = next(p for p in doc["peers"] if p["role"] == "learner")
    samplers = [p for p in doc["peers"] if p["role"] == "sampler"]
    samplers[0]["name"] = "alice"
    board = LearnerBoard(Path("/nonexistent"))
    for t in range(1, 60):
        board.add_step(_step(time.time() - 60 + t, [s["peer_id"] for s in samplers]))
    me = Identity.generate()
    learner["peer_id"] = me.peer_id
    records = board.records(me, "sim-run")
    doc["board"] = merge_boards([records[0]], {p["peer_id"]: p.get("name", "") for p in doc["peers"]})
    doc["curves"] = curves_section([records[1]])
    return doc


def test_the_page_draws_curves_and_the_board_and_escapes_names():
    doc = _doc_with_board()
    doc["peers"][3]["name"] = "<img src=x onerror=alert(1)>"  # even an unmended name is escaped
    validate(doc)
    page = render(doc)
    assert page.count("<svg") == 4 and "<polyline" in page
    assert "<b>alice</b>" in page and "id='board'" in page
    assert "<img" not in page and "&lt;img" in page and "<script" not in page


def test_own_line_text():
    line = {"groups": 12, "tokens": 960, "refused": 1, "learners": 1, "ranks": [[2, 3]], "at": 100.0}
    assert own_line_text(line, now=110.0) == (
        "; board: 12 groups trained (960 tokens), 1 refused, rank 2 of 3 (the learners' board of 10 s ago)"
    )
    assert own_line_text(None) == ""


async def _requests(port: int, lines: list[bytes]) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out = []
    for line in lines:
        writer.write(line)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
        body = await reader.readexactly(length) if not line.startswith(b"HEAD") else b""
        out.append(head.split(b"\r\n")[0] + b" " + body[:40])
    writer.close()
    return out


def test_the_server_is_read_only_and_limits_each_client():
    async def main():
        server = PageServer({"title": "schema"}, rate=5, burst=10)
        _, port = await server.start("127.0.0.1", 0)
        server.set_status("<p>page</p>", {"run_id": "r"})
        get = lambda path: f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()  # noqa: E731
        answers = await _requests(
            port, [get("/"), get("/status.json"), get("/schema.json"), get("/nope"), b"POST / HTTP/1.1\r\n\r\n"]
        )
        assert [a.split(b" ")[1] for a in answers] == [b"200", b"200", b"200", b"404", b"405"]
        assert json.loads(answers[1].split(b" ", 3)[3]) == {"run_id": "r"}
        flood = await _requests(port, [get("/status.json")] * 50)
        assert sum(b" 429 " in a for a in flood) >= 40 and server.counts["429"] >= 40
        await server.close()

    asyncio.run(main())


def test_the_dashboard_shows_names_as_text_and_the_board_panel():
    from rich.console import Console

    from swarmnode.observe.dashboard_view import build_view

    doc = _doc_with_board()
    sampler = next(p for p in doc["peers"] if p["role"] == "sampler" and p["name"] != "alice")
    sampler["name"] = "[bold red]mallory[/]"  # rich markup in a name is shown, never interpreted
    console = Console(width=160, record=True, color_system=None)
    console.print(build_view(doc, max_rows=10))
    text = console.export_text()
    assert "[bold red]mallory[/]" in text and "contributors" in text and "alice" in text


def test_status_text_lists_the_contributors_with_their_names():
    from swarmnode.observe.status import format_status

    text = format_status(_doc_with_board())
    assert "contributors (groups trained, tokens, refused):" in text and "alice (" in text


def test_a_held_out_reward_lands_on_the_curve_where_the_steps_carry_it():
    curves = Curves()
    for step in range(1, 11):
        curves.add({**_step(float(step), ["x"]), **({"eval_reward": 0.5} if step % 5 == 0 else {})})
    held = curves.series()["heldout_reward"]
    assert held[4] == 0.5 and held[9] == 0.5 and held[0] is None


def test_a_save_cut_short_leaves_the_previous_board(tmp_path):
    board = LearnerBoard.load(tmp_path)
    board.add_step(_step(1.0, ["12D3KooWsampler"]))
    board.save()
    (tmp_path / f".{BOARD_FILE}.tmp").write_text('{"tally": {"entr')  # killed mid-save
    again = LearnerBoard.load(tmp_path)
    assert again.tally.groups == 2 and not (tmp_path / f".{BOARD_FILE}.tmp").exists()


@pytest.mark.parametrize("text", ["8080", "host:port", "127.0.0.1:70000"])
def test_a_bad_web_address_is_one_usage_line(text):
    from swarmnode.web.run import parse_address

    with pytest.raises(UsageError, match="ADDR:PORT"):
        parse_address(text)
    assert parse_address(":8080") == ("0.0.0.0", 8080) and parse_address("[::1]:0") == ("::1", 0)
