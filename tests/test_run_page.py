"""A real swarm on loopback with named samplers: the contributors board agrees with the learner's steps file within
one heartbeat, and with each sampler's own line in `status --self`; a board forged by a key that is not the run's
learner is refused and counted; the run page (`dashboard --web`) opened in headless Chromium renders the curves
and the board with the public names (screenshot kept); its JSON fits the status schema; a flood of 1,000
requests a second from one client leaves the learner's step rate at >= 0.8x its calm rate; the board survives a
learner restart."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from restart_helpers import WORK, learner_args, steps
from swarm_helpers import LocalSwarm, swarmnode_cmd
from test_dashboard import wait_for

from swarmnode.errors import ExitCode
from swarmnode.identity import Identity
from swarmnode.observe.status_schema import validate

pytestmark = pytest.mark.usefixtures("starts_processes")  # every test here starts processes

HEARTBEAT = 1.0  # the swarm helpers' network.heartbeat_interval
NAMES = {"alice": "alice", "bob": "Bob's GPU"}
ARTEFACTS = Path(os.environ.get("SWARMNODE_ARTEFACTS", "/tmp/swarmnode-artefacts"))
TESTS = Path(__file__).parent


def trained_by(rows: list[dict], peer_id: str, until: float) -> int:
    """Groups of `peer_id` in the steps file's steps up to wall time `until`."""
    return sum(
        n
        for r in rows
        if r["time"] <= until
        for p, n in zip(r.get("sampler_ids", []), r.get("sampler_valid", []), strict=False)
        if p == peer_id
    )


def agrees(rows: list[dict], peer_id: str, groups: int, at: float) -> bool:
    """Whether `groups` (a board's count made at `at`) is the steps file's count within one heartbeat."""
    return trained_by(rows, peer_id, at - HEARTBEAT) <= groups <= trained_by(rows, peer_id, at + HEARTBEAT)


def step_rate(path: Path, seconds: float) -> float:
    """The learner's steps per second over the next `seconds` (from its steps file)."""
    before = len(steps(path))
    time.sleep(seconds)
    return (len(steps(path)) - before) / seconds


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def open_in_browser(browser: str, url: str, tmp_path: Path) -> None:
    """The page in headless Chromium: its DOM has the curves and the board with the public names; its screenshot
    is kept (printed path)."""
    shot = tmp_path / "run-page.png"
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=90).stdout
    assert dom.count("<svg") >= 4 and "<polyline" in dom, dom[:2000]
    assert all(f"<b>{name}</b>" in dom for name in NAMES.values()), dom[-3000:]
    assert 'id="board"' in dom
    subprocess.run([*flags, "--window-size=1280,1800", f"--screenshot={shot}", url], timeout=90, check=True)
    assert shot.stat().st_size > 10_000
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    kept = ARTEFACTS / "run-page.png"
    shutil.copy(shot, kept)
    print(f"run page screenshot: {kept}")


@pytest.mark.slow  # CI's long-scenario step runs it (.ci/run)
def test_named_samplers_on_the_board_and_the_run_page_in_a_browser(tmp_path):
    steps_file = tmp_path / "learner" / "learner_steps.jsonl"
    refused = subprocess.run(
        swarmnode_cmd("join", "--initial-peers", f"/ip4/127.0.0.1/tcp/1/p2p/{Identity.generate().peer_id}")
        + ["--public-name", "<b>x</b>"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # markup in a name: one line, before anything starts
    assert refused.returncode == ExitCode.USAGE and "characters not allowed" in refused.stderr, refused.stderr
    with LocalSwarm(tmp_path) as swarm:
        swarm.bootstrap()
        learner = swarm.join("learner", "learner", **learner_args(tmp_path))
        keys = [f"trust.learner_keys=[{swarm.learner_keys[0]}]"]
        samplers = {
            who: swarm.join(
                who, "sampler", work=True, extra=[*WORK, "--set", f"data_dir={tmp_path / who}", "--public-name", name]
            ).ready_fields()["peer_id"]
            for who, name in NAMES.items()
        }
        forger = subprocess.Popen(
            [sys.executable, str(TESTS / "board_forger.py"), "--initial-peers", swarm.initial_peers]
            + ["--run", swarm.run_id, "--victim", samplers["alice"]],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:

            def board_of_both():
                doc = swarm.status(sets=keys)
                entries = {e["peer_id"]: e for e in doc.get("board", {}).get("entries", [])}
                return doc if all(entries.get(p, {}).get("groups", 0) > 0 for p in samplers.values()) else None

            doc = wait_for(board_of_both, 150, 1.0, "both samplers on the board")
            validate(doc)
            rows = steps(steps_file)
            at = doc["board"]["learners"][0]["at"]
            for who, peer_id in samplers.items():
                entry = next(e for e in doc["board"]["entries"] if e["peer_id"] == peer_id)
                assert entry["name"] == NAMES[who]
                assert agrees(rows, peer_id, entry["groups"], at), (who, entry, trained_by(rows, peer_id, at))
            assert forger.stdout is not None and forger.stdout.readline().strip() == "forging"
            doc = wait_for(
                lambda: (d := swarm.status(sets=keys))["board"]["refused_boards"] and d, 60, 1.0, "the forged board"
            )  # a board of a key that is not the run's learner: refused, counted, not believed
            assert max(e["groups"] for e in doc["board"]["entries"]) < 10**9

            web = swarm.spawn(
                "web",
                ["dashboard", *swarm._set_args(), "--set", keys[0], "--initial-peers", swarm.initial_peers]
                + ["--web", "127.0.0.1:0", "--refresh", "1"],
            )
            url = web.wait_line("run page:", 60).split()[0]
            time.sleep(2)  # a poll or two
            page_doc = json.loads(urllib.request.urlopen(url + "status.json", timeout=10).read())
            validate(page_doc)  # the JSON endpoint fits the status schema
            browser = chromium()
            if browser is not None:
                open_in_browser(browser, url, tmp_path)

            # 1,000 requests a second from one client: the learner does not slow down
            calm = step_rate(steps_file, 6.0)
            host, port = url.split("//")[1].rstrip("/").split(":")
            flood = subprocess.Popen(
                [sys.executable, str(TESTS / "web_flood.py"), host, port, "/status.json", "1000", "6"],
                stdout=subprocess.PIPE,
                text=True,
            )
            time.sleep(0.5)
            flooded = step_rate(steps_file, 5.0)
            figures = json.loads(flood.communicate(timeout=30)[0])
            print(f"learner steps/s calm {calm:.2f}, flooded {flooded:.2f} ({flooded / calm:.2f}x); flood {figures}")
            assert figures["sent"] >= 5000 and figures["codes"].get("429", 0) > figures["sent"] / 2, figures
            assert flooded >= 0.8 * calm, (calm, flooded, figures)
            urllib.request.urlopen(url, timeout=10).read()  # the page still answers

            # each sampler's own line (`status --self`) is the learner's count
            def own_line(who: str):
                answer = subprocess.run(
                    swarmnode_cmd("status", "--self", "--json", "--set", f"data_dir={tmp_path / who}"),
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                board = json.loads(answer.stdout).get("board") or {}
                return board if board.get("groups") else None

            for who, peer_id in samplers.items():
                line = wait_for(lambda who=who: own_line(who), 45, 1.0, f"{who}'s own line")
                assert agrees(steps(steps_file), peer_id, line["groups"], line["at"]), (who, line)

            # the board survives a learner restart
            before = {e["peer_id"]: e["groups"] for e in swarm.status(sets=keys)["board"]["entries"]}
            learner.stop()
            again = swarm.join("learner-again", "learner", **learner_args(tmp_path))
            again.wait_line("learner ready:", 120)
            restarted = time.time()

            def board_after_restart():
                doc = swarm.status(sets=keys)
                learners = doc.get("board", {}).get("learners", [])
                return doc if learners and learners[0]["at"] > restarted + HEARTBEAT else None

            doc = wait_for(board_after_restart, 60, 1.0, "a board from the restarted learner")
            rows, at = steps(steps_file), doc["board"]["learners"][0]["at"]
            for peer_id in samplers.values():
                entry = next(e for e in doc["board"]["entries"] if e["peer_id"] == peer_id)
                assert entry["groups"] >= before[peer_id] and agrees(rows, peer_id, entry["groups"], at), entry
        finally:
            forger.terminate()
            forger.wait(20)
    if browser is None:  # everything else was checked
        pytest.skip("no chromium on this machine (apt-get install chromium): the page was not opened in a browser")
