"""The dashboard's view, pure (no I/O): `build_view(doc, history)` turns a `status --json` document (and what
earlier polls saw, `History`) into a rich renderable: header, peers, learner panels, versions, alerts."""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from rich.console import Group, JustifyMethod, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from swarmnode.observe.board_panel import board_panel, peer_cell
from swarmnode.observe.card_view import card_panel
from swarmnode.observe.census import page_of, worst_first
from swarmnode.observe.health import rejected_by_reason
from swarmnode.observe.status import other_runs_hint
from swarmnode.staleness import bucket_label

SPARKS = "▁▂▃▄▅▆▇█"
ROLE_ORDER = {"learner": 0, "sampler": 1, "bootstrap": 2}
ROLE_STYLE = {"learner": "bold magenta", "sampler": "cyan", "bootstrap": "dim"}


class History:
    """What earlier polls saw: swarm tokens/s over time, the last poll error (if the last poll failed), and the
    last log lines this process wrote while the live view was up (they are shown in the view, not on stderr)."""

    def __init__(self, length: int = 60) -> None:
        self.tokens: deque[float] = deque(maxlen=length)
        self.error: str | None = None
        self.polls = 0
        self.logs: deque[str] = deque(maxlen=3)
        self.page = 0  # the peers table's page (n / p on a terminal)

    def add(self, doc: dict[str, Any]) -> None:
        self.tokens.append(float(doc.get("tokens_per_s", 0.0)))
        self.polls += 1
        self.error = None


def sparkline(values: list[Any], width: int = 32) -> str:
    """Unicode sparkline of the last `width` values, scaled to their min..max (None -> a space)."""
    vals = list(values)[-width:]
    nums = [v for v in vals if isinstance(v, (int, float))]
    if not nums:
        return ""
    lo, hi = min(nums), max(nums)
    span = hi - lo
    out = []
    for v in vals:
        if not isinstance(v, (int, float)):
            out.append(" ")
        else:
            out.append(SPARKS[int((v - lo) / span * (len(SPARKS) - 1)) if span > 0 else len(SPARKS) // 2])
    return "".join(out)


def _short(peer_id: str) -> str:
    return peer_id[-8:]


def _fmt(value: Any, spec: str = ".3f", missing: str = "-") -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return missing
    return format(value, spec)


def _hardware(hw: dict[str, Any]) -> str:
    if hw.get("gpu"):
        mem = hw.get("gpu_mem_gb")
        return f"{hw['gpu']}" + (f" {mem:.0f}G" if isinstance(mem, (int, float)) and mem else "")
    parts = [f"cpu×{hw['cpus']}" if hw.get("cpus") else "cpu"]
    if isinstance(hw.get("ram_gb"), (int, float)):
        parts.append(f"{hw['ram_gb']:.0f}G")
    return " ".join(parts)


def _throughput(p: dict[str, Any]) -> str:
    h = p.get("health", {})
    if p["role"] == "sampler" and h.get("paused"):
        return f"paused: {h['paused']}"
    if p["role"] == "sampler":
        return f"{_fmt(h.get('tokens_per_s'), '.0f')} tok/s {_fmt(h.get('rollouts_per_s'), '.2f')} grp/s"
    if p["role"] == "learner":
        return f"step {_fmt(h.get('step'), 'd')} {_fmt(h.get('step_time'), '.2f')} s/step"
    if p["role"] == "bootstrap":
        return f"{_fmt(h.get('peers_seen'), 'd')} peers seen"
    return ""


def _header(doc: dict[str, Any], history: History) -> Panel:
    roles = ", ".join(f"{n} {r}" for r, n in sorted(doc["roles"].items(), key=lambda kv: ROLE_ORDER.get(kv[0], 9)))
    newest = doc["newest_version"]
    text = Text()
    text.append(f"run {doc['run_id']}", style="bold")
    census = doc.get("census")
    estimated = census is not None and not census["exact"]
    text.append(f"   peers {'~' if estimated else ''}{doc['count']:,} ({roles or 'none'})")
    if census is not None and estimated:
        c = census["count"]
        text.append(
            f" [{c['low']:,}-{c['high']:,}, 95 %: {census['shards_read']}/{census['shards']} shards read]", style="dim"
        )
    reach = doc.get("reachability") or {}
    if set(reach) - {"public", "unknown"}:  # someone behind a NAT: say how many of each
        text.append("   " + ", ".join(f"{n} {r}" for r, n in sorted(reach.items())), style="yellow")
    text.append(f"   newest version {newest if newest >= 0 else '-'}", style="bold green")
    text.append(f"   swarm {doc['tokens_per_s']:.0f} tokens/s ")
    text.append(sparkline(list(history.tokens), 20), style="green")
    text.append(f"   updated {time.strftime('%H:%M:%S', time.localtime(doc['queried_at']))}", style="dim")
    if history.error:
        text.append(f"\nlast poll failed: {history.error} (showing the previous data)", style="bold red")
    if (hint := other_runs_hint(doc)) is not None:  # a run-id mismatch, said at once
        text.append(f"\n{hint}", style="bold yellow")
    for line in history.logs:
        text.append(f"\n{line}", style="yellow")
    return Panel(text, title="swarmnode dashboard", subtitle="q to quit", border_style="blue")


REACH_STYLE = {"public": "green", "relayed": "yellow", "client-only": "cyan"}


def _peers_table(doc: dict[str, Any], max_rows: int, page: int = 0) -> Table:
    """The learners, then the other peers read, the worst first (`census.worst_first`), a page of `max_rows`."""
    bad = {a["peer_id"] for a in doc["alerts"] if a["peer_id"]}
    learners = sorted(
        (p for p in doc["peers"] if p["role"] == "learner"), key=lambda p: (p.get("designated") is False, p["peer_id"])
    )
    others = worst_first((p for p in doc["peers"] if p["role"] != "learner"), bad)
    peers = learners + others
    shown, page, pages = page_of(peers, page, max_rows)
    title = "peers" + (f", the worst first: page {page + 1} of {pages} (n / p)" if pages > 1 else "")
    table = Table(expand=True, title=title, title_justify="left", pad_edge=False)
    columns: list[tuple[str, JustifyMethod]] = [
        ("peer", "left"),
        ("role", "left"),
        ("reach", "left"),
        ("hardware", "left"),
        ("version", "right"),
        ("lag", "right"),
        ("throughput", "left"),
        ("last seen", "right"),
        ("note", "left"),
    ]
    for col, justify in columns:
        table.add_column(col, justify=justify, no_wrap=True)
    for p in shown:
        version = "-" if p["version"] < 0 else str(p["version"])
        lag = "-" if p.get("lag") is None else str(p["lag"])
        note = "self-declared" if p.get("designated") is False else str(p.get("health", {}).get("paused") or "")
        reach = p.get("reachability", "unknown")
        table.add_row(
            peer_cell(p, _short(p["peer_id"])),
            Text(p["role"], style=ROLE_STYLE.get(p["role"], "")),
            Text(reach, style=REACH_STYLE.get(reach, "dim")),
            _hardware(p.get("hardware", {})),
            version,
            lag,
            _throughput(p),
            f"{p['age_s']:.1f} s",
            Text(note or ("alert" if p["peer_id"] in bad else ""), style="yellow"),
            style="red" if p["peer_id"] in bad else None,
        )
    if pages > 1:
        table.add_row("…", f"{len(peers) - len(shown)} more", *[""] * 7)
    return table


def _histogram(counts: list[int], width: int = 24) -> Table:
    grid = Table.grid(padding=(0, 1))
    top = max(counts, default=0) or 1
    for i, n in enumerate(counts):
        grid.add_row(
            Text(f"τ {bucket_label(i)}", style="dim"),
            Text("█" * max(int(n > 0), round(n / top * width)), style="cyan"),
            str(n),
        )
    return grid


def _learner_panel(p: dict[str, Any]) -> Panel:
    h = p.get("health", {})
    rewards = h.get("reward_history") or []
    versions = h.get("reward_versions") or []
    nums = [r for r in rewards if isinstance(r, (int, float))]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("step / version", f"{_fmt(h.get('step'), 'd')} / {_fmt(h.get('version'), 'd')}")
    grid.add_row("reward mean", f"{_fmt(h.get('reward_mean'))}  (best {_fmt(max(nums, default=None))})")
    span = f"v{versions[0]}..v{versions[-1]}" if versions else ""
    grid.add_row("reward trend", Text(sparkline(rewards), style="green") + Text(f" {span}", style="dim"))
    grid.add_row(
        "KL vs sampler",
        Text(sparkline(h.get("kl_history") or [], 24), style="yellow") + Text(f" {_fmt(h.get('kl'), '.4f')}"),
    )
    grid.add_row(
        "IS-var trend",
        Text(sparkline(h.get("is_var_history") or [], 24), style="yellow")
        + Text(f" {_fmt(h.get('is_weight_var'), '.4f')}"),
    )
    grid.add_row("paper IS var", f"{_fmt(h.get('ratio_peqq_var'), '.4f')}  (p/E_q[q])")
    if h.get("eval_reward") is not None:  # learner.eval_every: the held-out split, scored beside training
        grid.add_row(
            "held-out",
            Text(sparkline(h.get("eval_history") or [], 16), style="cyan")
            + Text(
                f" {_fmt(h.get('eval_reward'))} at v{_fmt(h.get('eval_version'), 'd')}  "
                f"(pass@k {_fmt(h.get('eval_pass_at_k'))}, best {_fmt(h.get('eval_best'))})"
            ),
        )
    grid.add_row("entropy", _fmt(h.get("entropy"), ".3f"))
    grid.add_row("clip fraction", _fmt(h.get("clip_frac")))
    if h.get("masked_frac") is not None:  # an off-policy correction is on
        grid.add_row("masked (off-policy)", _fmt(h.get("masked_frac")))
    grid.add_row("received", _fmt(h.get("groups_received"), "d"))
    rejected = rejected_by_reason(h)
    grid.add_row("rejected", ", ".join(f"{k} {v}" for k, v in rejected.items()) or "0")
    grid.add_row("dropped stale", _fmt(h.get("dropped_stale"), "d"))
    grid.add_row("staleness", _histogram(h.get("staleness_hist") or []))
    if h.get("averaging_rounds") is not None:  # one of several learners averaging through hivemind
        grid.add_row("averaging", _averaging(h))
    if h.get("mode") == "sapo":  # its own policy: what it trained on, by origin
        grid.add_row(
            "trained on", f"{_fmt(h.get('local_groups'), 'd')} own + {_fmt(h.get('external_groups'), 'd')} external"
        )
        grid.add_row("reward lies", _fmt(h.get("reward_lies"), "d"))
        peers = zip(h.get("external_peers") or [], h.get("external_counts") or [])
        grid.add_row("external from", ", ".join(f"{str(peer)[-8:]} {n}" for peer, n in peers) or "nobody yet")
        implausible = zip(h.get("implausible_peers") or [], h.get("implausible_counts") or [])
        grid.add_row("implausible", ", ".join(f"{str(peer)[-8:]} {n}" for peer, n in implausible) or "none")
        if h.get("distrusted_peers"):
            grid.add_row("distrusted", ", ".join(str(peer)[-8:] for peer in h["distrusted_peers"]))
    title = "sapo node" if h.get("mode") == "sapo" else "learner"
    if p.get("designated") is False:
        title = "self-declared learner (not in trust.learner_keys)"
    return Panel(grid, title=f"{title} {_short(p['peer_id'])}", border_style="magenta")


def _averaging(h: dict[str, Any]) -> str:
    """Averaging rounds of one of several learners: done, failed, the last one's group, time and traffic."""
    text = f"{_fmt(h.get('averaging_rounds'), 'd')} rounds, {_fmt(h.get('averaging_failures'), 'd')} failed"
    if h.get("averaging_group") is not None:
        text += (
            f"; last: {_fmt(h.get('averaging_group'), 'd')} learners, {_fmt(h.get('averaging_seconds'), '.2f')} s, "
            f"{_fmt(h.get('averaging_mb'), '.1f')} MB"
        )
        if (outer := h.get("averaging_outer_lr")) is not None and outer != 1:
            text += f", outer step {outer:g}"
    return text


def _versions_panel(doc: dict[str, Any], width: int = 20) -> Panel:
    grid = Table.grid(padding=(0, 1))
    holders = doc["versions"]
    top = max(holders.values(), default=0) or 1
    for version, n in list(holders.items())[:12]:
        current = int(version) == doc["newest_version"]
        grid.add_row(
            Text(f"v{version}", style="bold green" if current else ""),
            Text("█" * max(1, round(n / top * width)), style="green" if current else "cyan"),
            f"{n} sampler{'s' if n != 1 else ''}",
        )
    if not holders:
        grid.add_row(Text("no sampler holds a version yet", style="dim"))
    return Panel(grid, title="versions held", border_style="green")


def _alerts_panel(doc: dict[str, Any]) -> Panel:
    if not doc["alerts"]:
        return Panel(Text("none", style="green"), title="alerts", border_style="green")
    lines = Text()
    for i, a in enumerate(doc["alerts"][:10]):
        style = "bold red" if a["severity"] == "error" else "yellow"
        lines.append(("\n" if i else "") + f"{a['severity']}: {a['message']}", style=style)
    return Panel(lines, title=f"alerts ({len(doc['alerts'])})", border_style="red")


def build_view(doc: dict[str, Any], history: History | None = None, max_rows: int = 20) -> RenderableType:
    """The whole dashboard for one status document (pure: no I/O)."""
    history = history or History()
    learners = sorted((p for p in doc["peers"] if p["role"] == "learner"), key=lambda p: p.get("designated") is False)
    shown, rest = learners[:2], learners[2:]  # the designated learners' panels first
    middle = Table.grid(expand=True, padding=(0, 1))
    for _ in range(len(shown) + 1):
        middle.add_column(ratio=1)
    middle.add_row(*[_learner_panel(p) for p in shown], _versions_panel(doc))
    parts: list[RenderableType] = [
        _header(doc, history),
        *([card_panel(doc)] if "card" in doc else []),
        _peers_table(doc, max_rows, history.page),
        middle,
    ]
    if rest:
        parts.append(_other_learners(rest))
    if (board := board_panel(doc)) is not None:
        parts.append(board)
    return Group(*parts, _alerts_panel(doc))


def _other_learners(learners: list[dict[str, Any]]) -> Table:
    """Learners beyond the two with panels, a line each."""
    table = Table(
        expand=True,
        title=f"{len(learners)} more learner{'s' if len(learners) != 1 else ''}",
        title_justify="left",
        pad_edge=False,
    )
    for col in ("learner", "step", "version", "reward", "KL", "IS var", "received", "dropped stale", "rounds"):
        table.add_column(col, justify="left" if col == "learner" else "right")
    for p in learners:
        h = p.get("health", {})
        table.add_row(
            _short(p["peer_id"]),
            _fmt(h.get("step"), "d"),
            _fmt(h.get("version"), "d"),
            _fmt(h.get("reward_mean")),
            _fmt(h.get("kl"), ".4f"),
            _fmt(h.get("is_weight_var"), ".4f"),
            _fmt(h.get("groups_received"), "d"),
            _fmt(h.get("dropped_stale"), "d"),
            f"{_fmt(h.get('averaging_rounds'), 'd')}/{_fmt(h.get('averaging_failures'), 'd')} failed",
        )
    return table
