"""Swarm health on a real local swarm (bootstrap + 1 learner + 1 sampler at work, real p2pd on 127.0.0.1, the
tiny model): `status --json` against its schema, `/metrics` scrapes, and `swarmnode dashboard` driven in a real
terminal (tmux): it shows peers, roles, versions and reward figures, and `q` quits it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request

import pytest
from swarm_helpers import LocalSwarm, pid_alive, swarmnode_cmd

from swarmnode.errors import ExitCode
from swarmnode.identity import Identity
from swarmnode.observe.metrics import HEALTH_METRICS
from swarmnode.observe.status_schema import validate

pytestmark = pytest.mark.timeout(240)
WORK = ["--config", "tiny-cpu", "--set", "model.tiny.warm_start_steps=20", "--metrics-port", "0"]


def wait_for(predicate, timeout: float, interval: float = 0.5, what: str = "condition", shown=None):
    """Poll `predicate` until it returns something true; on timeout fail, with `shown()` (what was last seen)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            seen = f"; last seen:\n{shown()}" if shown else ""
            assert value, f"timed out after {timeout:.0f} s waiting for {what}{seen}"
            return value
        time.sleep(interval)


def learner_of(doc: dict) -> dict | None:
    return next((p for p in doc["peers"] if p["role"] == "learner"), None)


@pytest.fixture(scope="module")
def swarm(tmp_path_factory, starts_processes):
    """A working swarm, trained for a few steps; yields (LocalSwarm, {role: metrics url})."""
    root = tmp_path_factory.mktemp("dash-swarm")
    with LocalSwarm(root) as swarm:
        boot = swarm.bootstrap(extra=["--metrics-port", "0"])
        learner = swarm.join("learner", "learner", work=True, extra=[*WORK, "--set", f"data_dir={root / 'learner'}"])
        sampler = swarm.join("sampler", "sampler", work=True, extra=[*WORK, "--set", f"data_dir={root / 'sampler'}"])
        urls = {
            name: proc.wait_line("metrics:", 120)
            for name, proc in (("bootstrap", boot), ("learner", learner), ("sampler", sampler))
        }

        def trained():
            doc = swarm.status()
            learner_rec = learner_of(doc)
            return doc if learner_rec and learner_rec["health"].get("step", 0) >= 3 else None

        wait_for(trained, 90, 1.0, "3 learner steps")
        yield swarm, urls


def scrape(url: str) -> dict[str, float]:
    """`/metrics` as {series (name + labels): value}."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[series] = float(value)
    return out


def series(name: str, role: str) -> str:
    kind = HEALTH_METRICS[name][1]
    return f'{HEALTH_METRICS[name][0]}{"_total" if kind == "counter" else ""}{{role="{role}"}}'


def test_status_json_fits_the_schema_during_a_run(swarm):
    swarm, _ = swarm
    doc = swarm.status()
    validate(doc)
    validate(doc, builtin=True)
    assert doc["roles"] == {"bootstrap": 1, "learner": 1, "sampler": 1}
    learner = learner_of(doc)
    health = learner["health"]
    assert health["step"] >= 3 and 0.0 <= health["reward_mean"] <= 1.0
    # the newest version any peer holds: a sampler that fetched from an ack can advertise it before the
    # learner's next heartbeat does, so the learner's record may trail it
    held = [p["version"] for p in doc["peers"] if isinstance(p.get("version"), int)]
    assert doc["newest_version"] == max(held) and doc["newest_version"] >= learner["version"] >= 3
    assert len(health["reward_history"]) == len(health["reward_versions"]) >= 2
    assert all(0.0 <= r <= 1.0 for r in health["reward_history"] if r is not None)
    assert sum(health["staleness_hist"]) >= 3 * 8 and health["groups_received"] >= 3 * 8
    assert health["max_staleness"] == doc["max_staleness"] == 16  # tiny-cpu's, as the learner runs it
    sampler = next(p for p in doc["peers"] if p["role"] == "sampler")
    assert sampler["health"]["tokens_per_s"] > 0 and sampler["health"]["groups_sent"] > 0
    assert sampler["health"]["fetch_mb_s"] > 0 and sampler["health"]["fetch_seconds"] > 0  # it fetched weights
    assert health["served_mb"] > 0 and health["serve_mb_s"] >= 0  # the learner served them
    assert sampler["lag"] is not None and 0 <= sampler["lag"] <= 16
    assert doc["tokens_per_s"] == pytest.approx(sampler["health"]["tokens_per_s"])
    assert next(p for p in doc["peers"] if p["role"] == "bootstrap")["health"]["peers_seen"] >= 1
    assert doc["alerts"] == []


def test_metrics_of_learner_sampler_and_bootstrap(swarm):
    _, urls = swarm
    learner = scrape(urls["learner"])
    for key in (
        "version",
        "step",
        "reward_mean",
        "kl",
        "is_weight_var",
        "ratio_peqq_var",
        "entropy",
        "clip_frac",
        "grad_norm",
        "step_time",
        "dropped_stale",
        "groups_received",
        "uptime",
    ):
        assert series(key, "learner") in learner, key
    assert learner[series("step", "learner")] >= 3
    assert learner[series("version", "learner")] >= 3
    assert 0.0 <= learner[series("reward_mean", "learner")] <= 1.0
    assert 0.0 <= learner[series("clip_frac", "learner")] <= 1.0
    assert learner[series("kl", "learner")] >= 0.0 and learner[series("is_weight_var", "learner")] >= 0.0
    assert 0.0 < learner[series("step_time", "learner")] < 60.0
    buckets = {k: v for k, v in learner.items() if k.startswith("swarmnode_staleness_groups_total{")}
    assert sum(buckets.values()) >= 24 and 'swarmnode_staleness_groups_total{bucket="0"}' in buckets

    sampler = scrape(urls["sampler"])
    for key in ("version", "lag", "rollouts_per_s", "tokens_per_s", "groups_sent", "groups_acked", "groups_dropped"):
        assert series(key, "sampler") in sampler, key
    assert sampler[series("tokens_per_s", "sampler")] > 0 and sampler[series("rollouts_per_s", "sampler")] > 0
    assert sampler[series("groups_acked", "sampler")] <= sampler[series("groups_sent", "sampler")]
    assert sampler[series("groups_sent", "sampler")] >= 8
    assert 0 <= sampler[series("lag", "sampler")] <= 16
    assert sampler[series("fetch_mb_s", "sampler")] > 0 and learner[series("served_mb", "learner")] > 0

    assert learner['swarmnode_reachability{reachability="public"}'] == 1.0
    assert sampler['swarmnode_reachability{reachability="public"}'] == 1.0

    boot = scrape(urls["bootstrap"])
    wait_for(
        lambda: scrape(urls["bootstrap"]).get(series("peers_seen", "bootstrap"), 0) >= 2,
        15,
        what="the bootstrap to count its peers",
    )
    assert boot[series("uptime", "bootstrap")] >= 0
    boot = wait_for(
        lambda: (
            (b := scrape(urls["bootstrap"])).get('swarmnode_peers_by_reachability{reachability="public"}', 0) >= 3 and b
        ),
        15,
        what="peers by reachability",
    )
    assert boot['swarmnode_reachability{reachability="public"}'] == 1.0


class TmuxDashboard:
    """`swarmnode dashboard` in a detached 160x50 tmux session on a private server; `close()` kills the server.
    After the dashboard exits, the pane's shell writes its exit code and the terminal's `stty -a`."""

    def __init__(self, swarm: LocalSwarm, root) -> None:
        self.root, self.name = root, f"dash-{os.getpid()}"
        self.tmux = ["tmux", "-S", str(root / "tmux.sock")]
        self.rc, self.stty, self.err = root / "dashboard.rc", root / "stty.txt", root / "dashboard.err"
        command = shlex.join(
            swarmnode_cmd("dashboard", *swarm._set_args(), "--initial-peers", swarm.initial_peers, "--refresh", "1")
        )
        # os.environ explicitly: readline in the pytest process may have set COLUMNS/LINES at the C level (80x24)
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        subprocess.run(
            [
                *self.tmux,
                "new-session",
                "-d",
                "-s",
                self.name,
                "-x",
                "160",
                "-y",
                "50",
                f"{command} 2>{self.err}; echo $? > {self.rc}.tmp; stty -a > {self.stty}; mv {self.rc}.tmp {self.rc}",
            ],
            check=True,
            timeout=20,
            env=env,
        )
        self.pane_pid = int(self._tmux("display-message", "-p", "-t", self.name, "#{pane_pid}"))

    def _tmux(self, *args: str) -> str:
        return subprocess.run([*self.tmux, *args], capture_output=True, text=True, timeout=10).stdout

    def capture(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def exit_code(self, timeout: float = 20.0) -> int:
        """Wait for the dashboard to exit; its exit code (the terminal must be back in canonical mode)."""
        wait_for(self.rc.exists, timeout, 0.2, "the dashboard to exit")
        assert "Traceback" not in self.err.read_text(), self.err.read_text()[-2000:]
        modes = self.stty.read_text().split()
        assert "icanon" in modes and "echo" in modes, "the terminal was left in cbreak mode"
        return int(self.rc.read_text())

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True, timeout=10)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_dashboard_in_a_real_terminal_shows_the_swarm_and_q_quits(swarm, tmp_path):
    swarm, _ = swarm
    dash = TmuxDashboard(swarm, tmp_path)
    try:

        def ready():
            """A view with every panel filled: the first views of a young swarm may lack the learner's reward,
            its staleness histogram (no group trained yet) or a sampler holding a version."""
            text = dash.capture()
            wanted = (
                "learner",
                "sampler",
                "bootstrap",
                "newest version",
                "reward mean",
                "versions held",
                "1 learner, 1 sampler, 1 bootstrap",
            )
            patterns = (
                r"reward mean\s+\d\.\d{3}",
                r"τ [\d-]+ +█+ +[1-9]",
                r"v\d+ +█+ +1 sampler",
                r"newest version ([3-9]|\d\d)",
            )
            return text if all(w in text for w in wanted) and all(re.search(p, text) for p in patterns) else None

        text = wait_for(ready, 120, what="the dashboard to show the swarm with every panel filled", shown=dash.capture)
        doc = swarm.status()
        for p in doc["peers"]:
            assert p["peer_id"][-8:] in text, p["role"]
        newest = int(re.search(r"newest version (\d+)", text).group(1))
        assert 3 <= newest <= doc["newest_version"]
        reward = float(re.search(r"reward mean\s+(\d\.\d{3})", text).group(1))
        assert 0.0 <= reward <= 1.0
        assert re.search(r"τ [\d-]+ +█+ +[1-9]", text), "staleness histogram"
        assert "1 learner, 1 sampler, 1 bootstrap" in text
        assert "reach" in text and text.count("public") >= 3  # every node on loopback is dialled directly
        assert re.search(r"v\d+ +█+ +1 sampler", text), "versions panel"

        dash.keys("q")
        assert dash.exit_code() == 0
        wait_for(lambda: not pid_alive(dash.pane_pid), 10, 0.2, "the pane's process to exit")
    finally:
        dash.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_dashboard_exits_cleanly_on_ctrl_c(swarm, tmp_path):
    swarm, _ = swarm
    dash = TmuxDashboard(swarm, tmp_path)
    try:
        wait_for(lambda: "newest version" in dash.capture(), 60, what="the dashboard to draw")
        dash.keys("C-c")
        assert dash.exit_code() == 0
    finally:
        dash.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
@pytest.mark.slow  # CI: .ci/run
@pytest.mark.usefixtures("starts_processes")
def test_dashboard_says_when_it_lost_contact_with_the_swarm(tmp_path):
    with LocalSwarm(tmp_path / "lonely", run_id="lonely-run") as lonely:
        boot = lonely.bootstrap()
        dash = TmuxDashboard(lonely, tmp_path)
        try:
            wait_for(lambda: "1 bootstrap" in dash.capture(), 60, what="the dashboard to show the bootstrap")
            boot.stop(signal.SIGKILL)

            def lost() -> str | None:
                text = dash.capture()
                return text if "lost contact with the swarm" in text else None

            text = wait_for(lost, 60, what="the dashboard to say it lost contact")
            assert "showing the previous data" in text and "1 bootstrap" in text  # the last view stays up
            dash.keys("q")
            assert dash.exit_code() == 0
        finally:
            dash.close()


@pytest.mark.usefixtures("starts_processes")
def test_dashboard_with_an_unreachable_bootstrap_is_one_clear_error():
    ghost = f"/ip4/127.0.0.1/tcp/9/p2p/{Identity.generate().peer_id}"
    result = subprocess.run(
        swarmnode_cmd("dashboard", "--initial-peers", ghost, "--startup-timeout", "2"),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == ExitCode.NETWORK and "Traceback" not in result.stderr
    # nothing listens on port 9: a refused connection is final, no retries until the timeout
    assert result.stderr.strip().splitlines()[-1].startswith("error: every initial peer refused the connection")


def test_the_learner_panel_names_the_averaging_rounds_and_an_outer_step():
    from swarmnode.observe.dashboard_view import _averaging

    h = {
        "averaging_rounds": 5,
        "averaging_failures": 1,
        "averaging_group": 2,
        "averaging_seconds": 0.25,
        "averaging_mb": 5.5,
        "averaging_outer_lr": 1.0,
    }
    assert _averaging(h) == "5 rounds, 1 failed; last: 2 learners, 0.25 s, 5.5 MB"  # the plain mean: not named
    assert _averaging({**h, "averaging_outer_lr": 2.0}).endswith("5.5 MB, outer step 2")
