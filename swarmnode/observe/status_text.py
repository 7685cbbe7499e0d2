"""`swarmnode status` as text a person reads: a table of every peer while the run is small; past `PAGE_ROWS` peers,
a summary (counts by role, version and reachability, exact or estimated; the learners) and one page of the other
peers, the worst first (`census.worst_first`), so that 10,000 peers read as a screenful, not 10,000 rows; then a
line per learner with its held-out figures (`held_out_lines`)."""

from __future__ import annotations

from typing import Any

from swarmnode.observe.census import page_of, worst_first
from swarmnode.protocol.peer import software_build

PAGE_ROWS = 40  # peers on one page of `status` (`--page N` for the others)
MAX_ALERT_LINES = 10  # alerts written out; the rest are counted by kind


def _count(doc: dict[str, Any]) -> str:
    census = doc.get("census")
    if not census or census["exact"]:
        return f"{doc['count']} live peers"
    c = census["count"]
    return (
        f"~{c['estimate']:,} live peers ({c['low']:,}-{c['high']:,}, 95 %; estimated from "
        f"{census['shards_read']} of {census['shards']} shards, {census['records_read']:,} records read)"
    )


def _by(counts: dict[str, int], estimates: dict[str, Any] | None, limit: int = 8) -> str:
    """`name n, name n, ...` (the largest first, at most `limit`), each estimate with its interval."""
    items = sorted(counts.items(), key=lambda kv: -kv[1])
    parts = []
    for name, n in items[:limit]:
        e = (estimates or {}).get(name)
        parts.append(
            f"{name} {n:,}" if e is None or e["low"] == e["high"] else f"{name} ~{n:,} ({e['low']:,}-{e['high']:,})"
        )
    if len(items) > limit:
        parts.append(f"{len(items) - limit} more")
    return ", ".join(parts) or "none"


HEADER = f"{'peer id':<54} {'role':<10} {'reach':<11} {'version':>7} {'lag':>4} {'last seen':>10}"


def peer_row(p: dict[str, Any]) -> str:
    """One peer's line of the table."""
    version = "-" if p["version"] < 0 else str(p["version"])
    lag = "-" if p.get("lag") is None else str(p["lag"])
    role = p["role"] + ("?" if p.get("designated") is False else "")  # a self-declared learner
    return (
        f"{p['peer_id']:<54} {role:<10} {p.get('reachability', 'unknown'):<11} {version:>7} "
        f"{lag:>4} {p['age_s']:>8.1f} s"
    )


def summary_lines(doc: dict[str, Any], page: int = 0, page_rows: int = PAGE_ROWS) -> list[str]:
    """The head line and the peers: every one in a table while they fit one page, else the summary and page
    `page` (0-based) of the non-learners, the worst first."""
    lines = [
        f"run {doc['run_id']}: {_count(doc)}, newest version {doc['newest_version']}, "
        f"{doc['tokens_per_s']:.0f} tokens/s"
    ]
    lines += build_lines(doc)
    peers = doc["peers"]
    if len(peers) <= page_rows and not (doc.get("census") and not doc["census"]["exact"]):
        return lines + [HEADER] + [peer_row(p) for p in peers]
    census = doc.get("census") or {}
    lines.append(f"roles: {_by(doc['roles'], census.get('roles'))}")
    lines.append(
        f"versions held by samplers: {_by({f'v{k}': n for k, n in doc['versions'].items()}, {f'v{k}': e for k, e in (census.get('versions') or {}).items()})}"
    )
    lines.append(f"reachability: {_by(doc['reachability'], census.get('reachability'))}")
    learners = [p for p in peers if p["role"] == "learner"]
    lines += [f"learners ({len(learners)}):", HEADER] + [peer_row(p) for p in learners[:page_rows]]
    flagged = {a["peer_id"] for a in doc["alerts"] if a.get("peer_id")}
    others = worst_first((p for p in peers if p["role"] != "learner"), flagged)
    shown, page, pages = page_of(others, page, page_rows)
    lines.append(
        f"peers read, the worst first (alerted, most versions behind, longest unheard, unreachable): "
        f"page {page + 1} of {pages}" + (" (--page N for another)" if pages > 1 else "")
    )
    return lines + [HEADER] + [peer_row(p) for p in shown]


MAX_NAMED_PEERS = 3  # peers of a less common build named in the builds line; beyond, counted


def build_lines(doc: dict[str, Any]) -> list[str]:
    """One line when the peers read run more than one swarmnode build: the builds counted, and the peers that run
    one other than the most common named (at most `MAX_NAMED_PEERS`); none when they all run one build."""
    builds = doc.get("builds") or {}
    if len(builds) < 2:
        return []
    common = max(builds, key=lambda b: builds[b])
    others = [p for p in doc["peers"] if software_build(p["software"]) != common]
    named = ", ".join(f"{p['peer_id']} runs {software_build(p['software'])}" for p in others[:MAX_NAMED_PEERS])
    more = f" and {len(others) - MAX_NAMED_PEERS} more" if len(others) > MAX_NAMED_PEERS else ""
    return [f"mixed builds: {_by(builds, None)} ({named}{more})"]


HELD_OUT_MORE = (("eval_pass_at_k", "pass@k"), ("eval_best", "best"))  # held-out figures after the reward


def held_out_lines(doc: dict[str, Any]) -> list[str]:
    """One line per learner whose health record carries held-out figures (`learner.eval_every`): the reward
    (mean@k) and the version it is of, pass@k and the best of its evaluations (a self-declared learner's none)."""
    lines = []
    for p in doc["peers"]:
        h = p.get("health") or {}
        if p["role"] != "learner" or p.get("designated") is False or h.get("eval_reward") is None:
            continue
        version = h.get("eval_version")
        at = f" at v{version}" if isinstance(version, int) and version >= 0 else ""
        more = [f"{label} {h[key]:.3f}" for key, label in HELD_OUT_MORE if h.get(key) is not None]
        lines.append(
            f"held-out, learner {p['peer_id'][-8:]}: reward {h['eval_reward']:.3f}{at}"
            + (f" ({', '.join(more)})" if more else "")
        )
    return lines


def alert_lines(alerts: list[dict[str, Any]], limit: int = MAX_ALERT_LINES) -> list[str]:
    """One line per alert, at most `limit`; the rest counted by kind."""
    lines = [f"{a['severity']}: {a['message']}" for a in alerts[:limit]]
    if len(alerts) > limit:
        rest: dict[str, int] = {}
        for a in alerts[limit:]:
            rest[a["kind"]] = rest.get(a["kind"], 0) + 1
        lines.append(f"... and {len(alerts) - limit} more alerts: " + ", ".join(f"{k} {n}" for k, n in rest.items()))
    return lines
