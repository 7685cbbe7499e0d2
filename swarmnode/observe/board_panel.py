"""The dashboard's contributors panel and peer cells with public names (rich `Text`: never read as markup)."""

from __future__ import annotations

from typing import Any, Literal

from rich.panel import Panel
from rich.table import Table
from rich.text import Text


def peer_cell(peer: dict[str, Any], short: str) -> Text:
    """A peer's short id, after its public name when it has one."""
    name = peer.get("name") or ""
    return Text(f"{name} {short}" if name else short, no_wrap=True)


def board_panel(doc: dict[str, Any], rows: int = 8) -> Panel | None:
    """The top `rows` contributors (groups trained, tokens, refused), or None while no learner publishes a board."""
    board = doc.get("board")
    if not board or not board.get("learners"):
        return None
    table = Table(expand=True, pad_edge=False, box=None)
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("#", "right"),
        ("contributor", "left"),
        ("groups", "right"),
        ("tokens", "right"),
        ("refused", "right"),
    )
    for col, justify in columns:
        table.add_column(col, justify=justify, no_wrap=True)
    for rank, line in enumerate(board["entries"][:rows], 1):
        who = Text(line["name"] or "", style="bold")
        who.append(f" {line['peer_id'][-8:]}", style="dim")
        table.add_row(str(rank), who, str(line["groups"]), f"{line['tokens']:,}", str(sum(line["refused"].values())))
    more = len(board["entries"]) - rows + board["rest"]["samplers"]
    title = "contributors" + (f" (+{more} more)" if more > 0 else "")
    if board.get("refused_boards"):
        title += f", {board['refused_boards']} forged board(s) refused"
    return Panel(table, title=title, title_align="left")
