"""The run page: one status document (what `status --json` shows, nothing more) as HTML with inline SVG curves.

Pure: `render(doc, refresh)` -> the page's text. Every piece of text that came from the swarm (public names,
peer ids, alert messages, the card) is HTML-escaped; the page carries no script (the server's
Content-Security-Policy allows none) and reloads itself every `refresh` seconds.
"""

from __future__ import annotations

import time
from collections import Counter
from html import escape
from typing import Any

from swarmnode.web.svg import line_chart

STYLE = """
body{font:14px system-ui,sans-serif;margin:1.2em;color:#1a202c;background:#f7fafc}
h1{font-size:1.4em;margin:0 0 .2em} h2{font-size:1.1em;margin:1.2em 0 .4em}
table{border-collapse:collapse;background:#fff} td,th{padding:2px 8px;border-bottom:1px solid #e2e8f0;text-align:left}
td.n,th.n{text-align:right} .dim{color:#718096} .err{color:#c53030} .warn{color:#b7791f}
.learner{background:#fff;border:1px solid #e2e8f0;padding:.5em;margin:.5em 0}
.chart{margin:4px} .chart .t{font-size:11px;font-weight:600} .chart .a,.chart .n{font-size:9px;fill:#718096}
.chart .f{fill:#f7fafc;stroke:#e2e8f0}
"""
CHARTS = (
    ("reward", ("reward", "heldout_reward")),
    ("KL to the samplers' policy", ("kl",)),
    ("staleness (versions)", ("staleness",)),
    ("groups trained per second", ("groups_per_s",)),
)


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _who(name: str, peer_id: str) -> str:
    short = f'<span class="dim">{_e(peer_id[-8:])}</span>'
    return f"<b>{_e(name)}</b> {short}" if name else f'<span title="{_e(peer_id)}">{_e(peer_id[:12])}…{short}</span>'


def _ago(at: float, now: float) -> str:
    seconds = max(0.0, now - at)
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def _header(doc: dict[str, Any]) -> str:
    card = doc.get("card") or {}
    roles = ", ".join(f"{n} {_e(role)}" for role, n in sorted(doc["roles"].items()))
    reach = ", ".join(f"{n} {_e(kind)}" for kind, n in sorted(doc.get("reachability", {}).items()))
    facts = [f"{doc['count']} peers ({roles})", f"reachability: {reach or '-'}"]
    facts.append(f"newest version {doc['newest_version']}, {doc['tokens_per_s']:.1f} tokens/s")
    if card:
        facts.insert(0, f"card v{_e(card.get('version'))}: model {_e(card.get('model'))}, task {_e(card.get('task'))}")
    return f"<h1>run {_e(doc['run_id'])}</h1><p>{'<br>'.join(facts)}</p>"


def _learners(doc: dict[str, Any]) -> str:
    names = {p["peer_id"]: p.get("name", "") for p in doc["peers"]}
    curves = doc.get("curves") or {}
    learners = [p for p in doc["peers"] if p["role"] == "learner" and p.get("designated", True)]
    out = ["<h2>learners</h2>"]
    if not learners:
        out.append("<p class='dim'>no live learner</p>")
    for p in learners:
        h = p.get("health", {})
        series = curves.get(p["peer_id"]) or {}
        steps = series.get("step", [])
        charts = []
        for title, metrics in CHARTS:
            lines = {m.replace("_", " "): series.get(m, []) for m in metrics}
            charts.append(line_chart(title, steps, lines))
        facts = f"step {h.get('step', '-')}, version {p['version']}, reward {h.get('reward_mean', '-')}"
        out.append(
            f'<div class="learner" id="learner-{_e(p["peer_id"])}"><div>{_who(names[p["peer_id"]], p["peer_id"])}: '
            f"{_e(facts)}</div>{''.join(charts)}</div>"
        )
    return "".join(out)


def _board(doc: dict[str, Any], now: float) -> str:
    board = doc.get("board") or {}
    out = ["<h2>contributors</h2>"]
    if not board.get("learners"):
        return out[0] + "<p class='dim'>no learner has published a board yet</p>"
    rows = [
        "<table id='board'><tr><th class='n'>#</th><th>contributor</th><th class='n'>groups</th>"
        "<th class='n'>tokens</th><th class='n'>refused</th><th>first seen</th><th>last seen</th></tr>"
    ]
    for rank, line in enumerate(board["entries"], 1):
        refused = ", ".join(f"{_e(r)} {n}" for r, n in sorted(line["refused"].items())) or "0"
        rows.append(
            f"<tr><td class='n'>{rank}</td><td>{_who(line['name'], line['peer_id'])}</td>"
            f"<td class='n'>{line['groups']}</td><td class='n'>{line['tokens']:,}</td><td class='n'>{refused}</td>"
            f"<td>{_ago(line['first'], now)}</td><td>{_ago(line['last'], now)}</td></tr>"
        )
    rows.append("</table>")
    rest = board["rest"]
    if rest["samplers"]:
        rows.append(f"<p>and {rest['samplers']} more samplers: {rest['groups']} groups, {rest['tokens']:,} tokens</p>")
    if board.get("refused_boards"):
        rows.append(
            f"<p class='warn'>{board['refused_boards']} board(s) from keys that are not the run's learners refused</p>"
        )
    return out[0] + "".join(rows)


def _peers(doc: dict[str, Any]) -> str:
    by = Counter((p["role"], p.get("reachability", "unknown")) for p in doc["peers"])
    summary = ", ".join(f"{n} {_e(role)} {_e(reach)}" for (role, reach), n in sorted(by.items()))
    rows = [
        f"<h2>peers</h2><p>{summary}</p><table id='peers'><tr><th>peer</th><th>role</th><th>reachability</th>"
        "<th class='n'>version</th><th class='n'>lag</th><th class='n'>last seen</th></tr>"
    ]
    for p in sorted(doc["peers"], key=lambda p: (p["role"], p["peer_id"])):
        lag = "-" if p.get("lag") is None else p["lag"]
        doubt = " <span class='warn'>(self-declared)</span>" if p.get("designated") is False else ""
        rows.append(
            f"<tr><td>{_who(p.get('name', ''), p['peer_id'])}</td><td>{_e(p['role'])}{doubt}</td>"
            f"<td>{_e(p.get('reachability', 'unknown'))}</td><td class='n'>{p['version']}</td>"
            f"<td class='n'>{_e(lag)}</td><td class='n'>{p['age_s']:.1f} s</td></tr>"
        )
    return "".join(rows) + "</table>"


def _alerts(doc: dict[str, Any]) -> str:
    if not doc["alerts"]:
        return "<h2>alerts</h2><p class='dim'>none</p>"
    items = "".join(
        f"<li class='{'err' if a['severity'] == 'error' else 'warn'}'>{_e(a['kind'])}: {_e(a['message'])}</li>"
        for a in doc["alerts"]
    )
    return f"<h2>alerts</h2><ul>{items}</ul>"


def render(doc: dict[str, Any] | None, refresh: float = 5.0, note: str = "") -> str:
    """The whole page for one status document (None: the first read is still under way)."""
    now = time.time()
    body = (
        "<p>reading the swarm...</p>"
        if doc is None
        else _header(doc) + _learners(doc) + _board(doc, now) + _peers(doc) + _alerts(doc)
    )
    foot = f"<p class='dim'>read {_ago(doc['queried_at'], now) if doc else '-'}; {_e(note)} "
    foot += "<a href='status.json'>status.json</a> · <a href='schema.json'>schema.json</a></p>"
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='{max(1, round(refresh))}'>"
        f"<title>swarmnode run {_e(doc['run_id']) if doc else ''}</title><style>{STYLE}</style></head>"
        f"<body>{body}{foot}</body></html>"
    )
