"""`swarmnode status --self`: is the node on this machine working? One line, an exit code a monitor can use, and
`--on-alert CMD`, run when the answer changes.

The answer comes from the node's own `health.json` (`swarmnode.observe.self_record`), with no network:

| state | exit | when |
|---|---|---|
| contributing | 0 | it did work in the last `RECENT_S` s: groups acknowledged (sampler) or trained (learner) |
| idle | 1 | alive, but no recent work, and why: starting, no learner, too stale, waiting for credit, no samplers |
| failing | 2 | not running, not updating its record, disk full, or its groups sent but not acknowledged |
| unknown | 3 | no node record in the data directory |

`--on-alert CMD` remembers the last state in `<data_dir>/alert_state.json` and runs CMD through the shell when the
state changes (the first check counts as a change from "contributing"), with SWARMNODE_ALERT_STATE,
SWARMNODE_ALERT_PREVIOUS, SWARMNODE_ALERT_MESSAGE (the line), SWARMNODE_ALERT_PEER and SWARMNODE_ALERT_JSON (the
whole answer) in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swarmnode.board.own_line import own_line_text
from swarmnode.observe.self_record import FILE_NAME, read_self_record

EXIT = {"contributing": 0, "idle": 1, "failing": 2, "unknown": 3}
RECENT_S = 300.0  # work within this window counts as contributing
STARTING_S = 180.0  # a node this young with no work yet is starting, not idle
STALE_BEATS = 15  # a record older than this many heartbeats (and at least STALE_MIN_S) is stuck
STALE_MIN_S = 60.0
ALERT_FILE = "alert_state.json"
ALERT_TIMEOUT_S = 60.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _delta(history: list, window: float, now: float) -> tuple[float, float, float]:
    """(sent, work, seconds covered) over the last `window` s of a record's counter history."""
    if not history:
        return 0.0, 0.0, 0.0
    last = history[-1]
    first = next((p for p in history if now - p[0] <= window), last)
    return last[1] - first[1], last[2] - first[2], last[0] - first[0]


def verdict(doc: dict[str, Any] | None, now: float | None = None, where: str | Path = "") -> dict[str, Any]:
    """The answer for a node record `doc` (None: none found in `where`): state, why, exit code and the figures."""
    now = time.time() if now is None else now
    if doc is None:
        return _answer(
            "unknown",
            f"no node record ({FILE_NAME}) in {where}: is a node running with this data "
            "directory? (`--set data_dir=...` names another)",
            {},
        )
    health = doc.get("health") or {}
    role = doc.get("role", "node")
    age = now - float(doc.get("written_at", 0))
    uptime = now - float(doc.get("started_at", now))
    history = doc.get("history") or []
    _, work_hour, _ = _delta(history, 3600.0, now)
    sent_recent, work_recent, span = _delta(history, RECENT_S, now)
    facts = {
        "role": role,
        "peer_id": doc.get("peer_id"),
        "pid": doc.get("pid"),
        "record_age_s": round(age, 1),
        "uptime_s": round(uptime, 1),
        "version": health.get("version"),
        **({"board": doc["board"]} if isinstance(doc.get("board"), dict) else {}),  # its line of the learners' boards
    }
    unit = "groups acknowledged" if role == "sampler" else "steps trained"
    facts["work_last_hour"] = int(work_hour)
    stale_after = max(STALE_MIN_S, STALE_BEATS * float(doc.get("heartbeat", 2.0)))
    pid = doc.get("pid")
    if isinstance(pid, int) and not _alive(pid):
        return _answer("failing", f"the node (pid {pid}) is not running; its last record is {age:.0f} s old", facts)
    if age > stale_after:
        return _answer("failing", f"its record has not changed for {age:.0f} s: the node is stuck or frozen", facts)
    if health.get("disk_full"):
        return _answer("failing", health["disk_full"], facts)
    lag = health.get("lag")
    if work_recent > 0:
        tail = f", version {health.get('version')}" + (f", {lag} behind" if lag is not None else "")
        return _answer("contributing", f"{int(work_hour)} {unit} in the last hour{tail}", facts)
    if role == "sampler" and sent_recent > 0 and span >= RECENT_S / 2:
        return _answer(
            "failing",
            f"{int(sent_recent)} groups sent in {span:.0f} s and none acknowledged: the "
            "learners refuse or never receive them (see the node's log)",
            facts,
        )
    if uptime < STARTING_S:
        return _answer("idle", f"starting ({uptime:.0f} s up, no work yet)", facts)
    paused = health.get("paused")
    if paused:
        return _answer("idle", f"paused: {paused}", facts)
    if doc.get("waiting_for") == "credit":
        return _answer("idle", "waiting for credit: the learners hold enough groups for now", facts)
    if role == "learner":
        return _answer(
            "idle", f"no samplers: no rollout groups to train on in the last {RECENT_S / 60:.0f} minutes", facts
        )
    return _answer("idle", f"no work in the last {RECENT_S / 60:.0f} minutes", facts)


def _answer(state: str, why: str, facts: dict[str, Any]) -> dict[str, Any]:
    return {"state": state, "why": why, "exit_code": EXIT[state], **facts}


def line(answer: dict[str, Any], with_peer: bool = True) -> str:
    """The one line: `<state>: <why>` (with the role when known), and the node's peer id at the end."""
    role = f"{answer['role']} " if answer.get("role") else ""
    peer = f" [peer {answer['peer_id']}]" if with_peer and answer.get("peer_id") else ""
    return f"{role}{answer['state']}: {answer['why']}{peer}" + own_line_text(answer.get("board"))


def find_record_dirs(data_dir: Path, explicit: bool) -> list[Path]:
    """The directories holding this machine's node records: `data_dir` itself when the config names it (or it
    has a record), else those under it (`<run dir>/<peer id>/`, the default layout) whose node is running, the
    newest first; with none running, the most recently written one; with no record, `[data_dir]`."""
    if explicit or (data_dir / FILE_NAME).exists():
        return [data_dir]
    records = sorted(data_dir.glob(f"*/{FILE_NAME}"), key=lambda p: p.stat().st_mtime, reverse=True)
    running = [p.parent for p in records if _running(p.parent)]
    return running or [p.parent for p in records[:1]] or [data_dir]


def _running(record_dir: Path) -> bool:
    pid = (read_self_record(record_dir) or {}).get("pid")
    return isinstance(pid, int) and _alive(pid)


def runs_found(home: Path) -> list[str]:
    """The run ids under `home` (`<home>/<run id>/<peer id>/health.json`) with a node record, newest first."""
    records = sorted(home.glob(f"*/*/{FILE_NAME}"), key=lambda p: p.stat().st_mtime, reverse=True)
    return list(dict.fromkeys(p.parent.parent.name for p in records))


def check(record_dir: Path, now: float | None = None, home: Path | None = None) -> dict[str, Any]:
    """The answer for the node whose data directory is `record_dir` (with no record there, the runs that have
    one under `home`, named in the answer: a node joined by invite keeps its record under the card's run id)."""
    doc = read_self_record(record_dir)
    answer = verdict(doc, now, record_dir)
    others = [run for run in runs_found(home) if run != record_dir.name] if doc is None and home else []
    if others:
        answer["why"] = (
            f"no node record ({FILE_NAME}) in {record_dir}; node records found for run "
            f"{', '.join(others)}: add --set run_id={others[0]}"
        )
        answer["runs_found"] = others
    return answer


def alert_if_changed(
    record_dir: Path, answer: dict[str, Any], command: str, run: Callable[..., Any] = subprocess.run
) -> bool:
    """Run `command` when `answer`'s state differs from the one remembered in `record_dir` (see the module
    docstring); remember the new state. True when the command ran."""
    memory = record_dir / ALERT_FILE
    try:
        previous = json.loads(memory.read_text()).get("state", "contributing")
    except (OSError, ValueError, AttributeError):
        previous = "contributing"
    if previous == answer["state"]:
        return False
    env = {
        **os.environ,
        "SWARMNODE_ALERT_STATE": answer["state"],
        "SWARMNODE_ALERT_PREVIOUS": previous,
        "SWARMNODE_ALERT_MESSAGE": line(answer, with_peer=False),  # the peer: SWARMNODE_ALERT_PEER
        "SWARMNODE_ALERT_PEER": str(answer.get("peer_id") or ""),
        "SWARMNODE_ALERT_JSON": json.dumps(answer),
    }
    try:
        run(command, shell=True, env=env, timeout=ALERT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        pass  # a hung hook must not hang the monitor; the state is still remembered
    try:
        memory.write_text(json.dumps({"state": answer["state"], "at": time.time()}))
    except OSError:
        pass
    return True


def run_self_status(
    data_dir: Path,
    explicit: bool,
    *,
    as_json: bool,
    on_alert: str | None,
    watch: float | None,
    echo: Callable[[str], None],
    home: Path | None = None,
) -> int:
    """`status --self`: print the answer (a line, or JSON; one per running node when several share the run's
    directory), run `on_alert` on a change; with `watch`, check again every `watch` seconds until interrupted. The
    exit code of the last check: its worst answer's."""
    while True:
        codes = []
        for record_dir in find_record_dirs(data_dir, explicit):
            answer = check(record_dir, home=None if explicit else home)
            echo(json.dumps({**answer, "data_dir": str(record_dir)}, sort_keys=True) if as_json else line(answer))
            if on_alert:
                alert_if_changed(record_dir, answer, on_alert)
            codes.append(answer["exit_code"])
        if not watch:
            return max(codes)
        time.sleep(watch)
