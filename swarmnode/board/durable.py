"""A learner's board state on its disk: the tally and the curves together in `<data_dir>/contributors.json`.

`LearnerBoard.load` reads what an earlier process of this learner saved (a damaged file is set aside and
counted, and the board starts empty); `add_step` feeds both from one steps-file record; `save` writes the file
atomically (the learner saves once per heartbeat and when it stops, so a crash loses at most one heartbeat of
counts); `records` signs the two DHT records (`board.record`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from swarmnode.board.curves import Curves
from swarmnode.board.record import BoardRecord, CurveRecord
from swarmnode.board.tally import ContributorTally, load_state, save_state
from swarmnode.identity import Identity

BOARD_FILE = "contributors.json"


class LearnerBoard:
    """The tally and curves of one learner, durable in its data directory."""

    def __init__(self, path: Path, tally: ContributorTally | None = None, curves: Curves | None = None) -> None:
        self.path = Path(path)
        self.tally = tally or ContributorTally()
        self.curves = curves or Curves()

    @classmethod
    def load(cls, data_dir: Path) -> LearnerBoard:
        """The board saved in `data_dir`, or an empty one (also when the file was damaged: `tally.damaged`)."""
        board = cls(Path(data_dir) / BOARD_FILE)
        state, damaged = load_state(board.path)
        board.tally.damaged = int(damaged)
        if state is not None:
            try:
                board.tally.load_state(state["tally"])
                board.curves.load_state(state["curves"])
            except (KeyError, TypeError, ValueError):
                board.tally, board.curves = ContributorTally(), Curves()
                board.tally.damaged = 1
        return board

    def add_step(self, record: dict[str, Any]) -> None:
        """One step as the steps file holds it (an untrained step's refusals count, its groups do not)."""
        self.tally.add_step(record)
        if record.get("trained", 1):
            self.curves.add(record)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        save_state(self.path, {"tally": self.tally.as_state(), "curves": self.curves.as_state()})

    def records(self, identity: Identity, run_id: str) -> tuple[BoardRecord, CurveRecord]:
        return BoardRecord.of(self.tally, identity, run_id), CurveRecord.of(self.curves, identity, run_id)
