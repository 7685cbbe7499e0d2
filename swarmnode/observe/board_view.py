"""The contributors board and public names in the status document (`status --json`, the dashboard, the run page).

`mend_names` replaces each peer's `name` by its harmless form under the reader's `names` policy and counts the
names it had to change (`names_mended`). `read_board` reads the boards and curves of the run's learners
(`swarm.board_keys`) and adds `board` (the learners' tallies merged per key, the top `SHOWN` with their public
names, and the rest counted) and `curves` (per learner) to the document. Boards are believed only from the
learners the document believes (the designated ones under `trust.learner_keys`, else every learner record); a
board of any other key, a self-declared learner's, is refused and counted (`board.refused_boards`; of at most
`MAX_DOUBTED` such keys a read, so a flood of learner records costs a bounded read).
"""

from __future__ import annotations

from typing import Any

from swarmnode.board.record import BoardRecord, CurveRecord
from swarmnode.protocol.public_name import NamePolicy, shown_name
from swarmnode.swarm.board_keys import read_boards
from swarmnode.swarm.membership import Membership

SHOWN = 64  # board lines in the document
MAX_BELIEVED = 32  # learners whose boards one read asks for (a run has a few; a flood of records must not cost more)
MAX_DOUBTED = 8  # self-declared learners whose boards are read, to count the refused ones


def mend_names(doc: dict[str, Any], policy: NamePolicy) -> dict[str, Any]:
    """Each peer's `name` in its harmless form; `names_mended`: how many had to change (or be hidden)."""
    mended = 0
    for peer in doc["peers"]:
        shown = shown_name(str(peer.get("name") or ""), policy)
        peer["name"] = shown.text
        mended += shown.changed
    doc["names_mended"] = mended
    return doc


def merge_boards(boards: list[BoardRecord], names: dict[str, str], refused_boards: int = 0) -> dict[str, Any]:
    """The `board` section from the believed learners' boards (lines merged per key, the most groups first)."""
    lines: dict[str, dict[str, Any]] = {}
    for board in boards:
        for e in board.entries:
            line = lines.setdefault(
                e.peer_id,
                {"peer_id": e.peer_id, "groups": 0, "tokens": 0, "first": e.first, "last": e.last, "refused": {}},
            )
            line["groups"] += e.groups
            line["tokens"] += e.tokens
            line["first"], line["last"] = min(line["first"], e.first), max(line["last"], e.last)
            for reason, n in e.refused.items():
                line["refused"][reason] = line["refused"].get(reason, 0) + n
    ranked = sorted(lines.values(), key=lambda x: (-x["groups"], -x["tokens"], x["first"], x["peer_id"]))
    for line in ranked:
        line["name"] = names.get(line["peer_id"], "")
    rest = {"samplers": 0, "groups": 0, "tokens": 0, "refused": 0}
    for board in boards:
        for key, value in board.rest().items():
            rest[key] += value
    for line in ranked[SHOWN:]:
        rest["samplers"] += 1
        rest["groups"] += line["groups"]
        rest["tokens"] += line["tokens"]
        rest["refused"] += sum(line["refused"].values())
    return {
        "learners": [
            {
                "peer_id": b.learner,
                "at": b.at,
                "samplers": b.samplers,
                "groups": b.groups,
                "tokens": b.tokens,
                "refused": b.refused,
            }
            for b in boards
        ],
        "entries": ranked[:SHOWN],
        "rest": rest,
        "refused_boards": refused_boards,
    }


def curves_section(curves: list[CurveRecord]) -> dict[str, Any]:
    """`curves`: learner peer id -> its series (`step` and each metric, aligned), `span` and `at`."""
    return {c.learner: {"at": c.at, "span": c.span, **c.series} for c in curves}


async def read_board(member: Membership, doc: dict[str, Any]) -> dict[str, Any]:
    """Add `board` and `curves` to a status document (see the module docstring)."""
    learners = [p for p in doc["peers"] if p["role"] == "learner"]
    believed = [p["peer_id"] for p in learners if p.get("designated", True)][:MAX_BELIEVED]
    doubted = [p["peer_id"] for p in learners if not p.get("designated", True)][:MAX_DOUBTED]
    assert member.dht is not None, "a started member reads the board"
    found = await read_boards(member.dht, believed + doubted)
    boards = [b for peer in believed if (b := found[peer][0]) is not None]
    curves = [c for peer in believed if (c := found[peer][1]) is not None]
    refused = sum(1 for peer in doubted if found[peer][0] is not None or found[peer][1] is not None)
    names = {p["peer_id"]: p.get("name", "") for p in doc["peers"]}
    doc["board"] = merge_boards(boards, names, refused)
    doc["curves"] = curves_section(curves)
    return doc


def board_lines(doc: dict[str, Any], rows: int = 10) -> list[str]:
    """The board as plain lines for `status` (the top `rows`; nothing when no learner published one)."""
    board = doc.get("board")
    if not board or not board["learners"]:
        return []
    out = ["contributors (groups trained, tokens, refused):"]
    for rank, line in enumerate(board["entries"][:rows], 1):
        who = f"{line['name']} ({line['peer_id'][-8:]})" if line["name"] else line["peer_id"]
        refused = sum(line["refused"].values())
        out.append(f"  {rank:>3}. {who}: {line['groups']} groups, {line['tokens']:,} tokens, {refused} refused")
    more = len(board["entries"]) - rows + board["rest"]["samplers"]
    if more > 0:
        out.append(f"  ... and {more} more samplers")
    if board.get("refused_boards"):
        out.append(f"  {board['refused_boards']} board(s) of keys that are not the run's learners refused")
    return out
