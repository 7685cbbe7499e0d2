"""The growth figures of one scale-lab run, from the JSON lines its hosts wrote (`host.py`).

`summarise(lines, since)` measures over the window from `since` (every sampler ready) to the last line:
control-plane bytes per node per minute (median sampler, busiest node, learner, bootstrap), a version's spread
(seconds from the learner holding it until 50 / 95 / 100 % of samplers hold it or a newer one), the learner's
upload in copies per version, its ingress (steps/s, groups/s, busy fraction, waste, ack p99, per-sampler spread;
for the samplers that sent nothing against those that did, how far behind the learner's version they were and
what their rows say they were doing),
the join (seconds to `ready`), the bootstrap's CPU, memory and connections, and the lab's own footprint.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

SPREAD_TAIL_S = 30.0  # versions published in the window's last seconds are not counted (not yet spread)


def read_lines(paths: Iterable[Path]) -> list[dict]:
    out = []
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a host killed mid-line
    return out


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of `values`; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _window(rows: list[dict], since: float) -> tuple[dict, dict] | None:
    inside = [r for r in rows if r["t"] >= since]
    return (inside[0], inside[-1]) if len(inside) >= 2 else None


def _rate_per_min(first: dict, last: dict, *keys: str) -> float:
    dt = max(1e-9, last["t"] - first["t"])
    return sum(last.get(k, 0) - first.get(k, 0) for k in keys) * 60.0 / dt


def spread(haves: list[dict], samplers: list[str], since: float, end: float) -> dict[str, Any]:
    """Per version the learner published in [since, end - SPREAD_TAIL_S]: seconds until 50/95/100 % of the
    samplers hold it (or newer); the median over versions of each, and the worst."""
    published = {h["v"]: h["t"] for h in haves if h["role"] == "learner"}
    held = defaultdict(list)  # sampler -> [(t, v)]
    for h in haves:
        if h["role"] == "sampler":
            held[h["name"]].append((h["t"], h["v"]))
    per_version = []
    for v, t_pub in sorted(published.items()):
        if not since <= t_pub <= end - SPREAD_TAIL_S:
            continue
        delays = []
        for name in samplers:
            got = [t for t, held_v in held.get(name, []) if held_v >= v and t >= t_pub - 1.0]
            delays.append(max(0.0, min(got) - t_pub) if got else float("inf"))
        per_version.append({q: quantile(delays, q) for q in (0.5, 0.95, 1.0)})
    if not per_version:
        return {"versions": 0}
    out: dict[str, Any] = {"versions": len(per_version)}
    for q, label in ((0.5, "p50"), (0.95, "p95"), (1.0, "p100")):
        values = [pv[q] for pv in per_version]
        out[f"{label}_s"] = statistics.median(values)
        out[f"{label}_worst_s"] = max(values)
    return out


def _silent_or_sending(
    nodes: dict[str, list[dict]], samplers: list[str], since: float, until: float
) -> Iterator[tuple[str, str, list[dict]]]:
    """(name, "silent" or "sending", its rows in [since, until]) for each sampler with two rows or more there:
    silent when it sent no group in the window."""
    for name in samplers:
        rows = [r for r in nodes.get(name, []) if since <= r["t"] <= until]
        if len(rows) >= 2:
            yield name, "sending" if rows[-1].get("sent", 0) - rows[0].get("sent", 0) else "silent", rows


def version_lag(
    haves: list[dict],
    nodes: dict[str, list[dict]],
    samplers: list[str],
    since: float,
    until: float,
    behind: int = 8,
    step: float = 2.0,
) -> dict[str, Any]:
    """How far behind the learner's newest version the samplers that sent nothing in [since, until] were, against
    those that sent: the mean lag in versions, and the mean share of the window spent more than `behind`
    versions behind (a sampler that far behind fetches before it generates: half the lab's `sync.max_staleness`
    of 16), sampled every `step` seconds."""
    learner = sorted((h["t"], h["v"]) for h in haves if h["role"] == "learner")
    held = defaultdict(list)
    for h in haves:
        if h["role"] == "sampler":
            held[h["name"]].append((h["t"], h["v"]))

    def newest(points: list[tuple[float, int]], t: float) -> int:
        return max((v for when, v in points if when <= t), default=0)

    ticks = [since + i * step for i in range(int((until - since) / step) + 1)]
    groups: dict[str, list[tuple[float, float]]] = {"silent": [], "sending": []}
    for name, kind, _ in _silent_or_sending(nodes, samplers, since, until):
        lags = [newest(learner, t) - newest(held[name], t) for t in ticks]
        groups[kind].append((statistics.fmean(lags), sum(lag > behind for lag in lags) / len(lags)))
    return {
        key: {
            "samplers": len(vals),
            "lag_mean": statistics.fmean(v[0] for v in vals) if vals else None,
            "share_far_behind": statistics.fmean(v[1] for v in vals) if vals else None,
        }
        for key, vals in groups.items()
    }


def sampler_states(nodes: dict[str, list[dict]], samplers: list[str], since: float, until: float) -> dict[str, Any]:
    """The share of the window [since, until] the samplers that sent nothing in it, and those that sent, spent in
    each state their rows tell (`host.sampler_state`: "too stale", "undelivered", "credit", "generating", ...),
    averaged over the samplers of each kind; {} for a run whose rows carry no state."""
    shares: dict[str, list[Counter]] = {"silent": [], "sending": []}
    for _, kind, rows in _silent_or_sending(nodes, samplers, since, until):
        states = Counter(r["state"] for r in rows if "state" in r)
        if states:
            total = sum(states.values())
            shares[kind].append(Counter({k: v / total for k, v in states.items()}))
    if not any(shares.values()):
        return {}
    return {
        kind: {
            "samplers": len(rows),
            **{state: round(sum(c[state] for c in rows) / len(rows), 3) for state in sorted(set().union(*rows))},
        }
        if rows
        else {"samplers": 0}
        for kind, rows in shares.items()
    }


def publisher_chunks(nodes: dict[str, list[dict]], samplers: list[str], since: float) -> dict[str, Any]:
    """Chunks the samplers asked of the learner (the publisher) in the window, and how many of them were asked
    after the fetch's wait for other holders' have-maps ran out with a holder still unheard (`ChunkSchedule.
    seed_taken_unheard`): the learner's upload that a longer wait might have spared; {} for rows without them."""
    asked = unheard = 0
    for name in samplers:
        w = _window(nodes.get(name, []), since)
        if w is None or "seed_chunks" not in w[1]:
            continue
        first, last = (row.get("seed_chunks", {}) for row in w)
        asked += last.get("asked", 0) - first.get("asked", 0)
        unheard += last.get("unheard", 0) - first.get("unheard", 0)
    if not asked and not unheard:
        return {}
    return {"asked": asked, "unheard": unheard, "unheard_share": round(unheard / asked, 3) if asked else None}


def control_calls(row: dict) -> int:
    """DHT calls a node row counts so far (made and answered, every `DHTProtocol` handler)."""
    return sum(v[2] for k, v in row.get("handles", {}).items() if k.startswith("DHTProtocol."))


def _median_name(names: list[str], values: dict[str, float]) -> str | None:
    """The node whose value is the median (the lower middle of an even count)."""
    ranked = sorted((values[n], n) for n in names if n in values)
    return ranked[(len(ranked) - 1) // 2][1] if ranked else None


def summarise(
    lines: list[dict],
    since: float,
    samplers: int | None = None,
    started: float | None = None,
    until: float | None = None,
) -> dict[str, Any]:
    """See the module docstring. Rates are over [since, until]; a version published in that window counts as
    spread when samplers hold it, even after `until` (the run went on)."""
    haves_all = [ln for ln in lines if ln.get("ev") == "have"]
    if until is not None:
        lines = [ln for ln in lines if ln.get("t", 0) <= until]
    nodes: dict[str, list[dict]] = defaultdict(list)
    procs: dict[str, list[dict]] = defaultdict(list)
    haves = [ln for ln in lines if ln.get("ev") == "have"]
    for ln in lines:
        if ln.get("ev") == "node":
            nodes[ln["name"]].append(ln)
        elif ln.get("ev") == "proc":
            procs[ln["host"]].append(ln)
    end = max((ln["t"] for ln in lines if "t" in ln), default=since)
    roles = {name: rows[0]["role"] for name, rows in nodes.items()}
    # samplers whose role started (a node whose p2pd never started has no role, so no version to wait for)
    sampler_names = sorted(n for n, r in roles.items() if r == "sampler" and any("sent" in row for row in nodes[n]))
    doc_failed = sum(1 for n, r in roles.items() if r == "sampler" and n not in sampler_names)
    ctl: dict[str, float] = {}
    calls: dict[str, float] = {}  # DHT calls made and answered a minute (the model's calls x bytes per call)
    for name, rows in nodes.items():
        if (w := _window(sorted(rows, key=lambda r: r["t"]), since)) is not None:
            ctl[name] = _rate_per_min(*w, "ctl_in", "ctl_out")
            calls[name] = (control_calls(w[1]) - control_calls(w[0])) * 60.0 / max(1e-9, w[1]["t"] - w[0]["t"])
    sampler_ctl = [ctl[n] for n in sampler_names if n in ctl]
    doc: dict[str, Any] = {
        "window_s": round(end - since, 1),
        "samplers": samplers or len(sampler_names),
        "samplers_working": len(sampler_names),
        "samplers_failed": doc_failed,
    }
    busiest = max((n for n in ctl if roles[n] != "bootstrap"), key=ctl.get, default=None)
    doc["control_bytes_per_min"] = {
        "median_sampler": statistics.median(sampler_ctl) if sampler_ctl else None,
        "busiest_node": ctl.get(busiest) if busiest else None,
        "busiest_role": roles.get(busiest),
        "learner": ctl.get("learner"),
        "bootstrap": ctl.get("bootstrap"),
        "max_sampler": max(sampler_ctl) if sampler_ctl else None,
    }
    boots = sorted(n for n, r in roles.items() if r == "bootstrap")
    doc["bootstraps"] = {
        n: {
            "control_bytes_per_min": ctl.get(n),
            "control_calls_per_min": calls.get(n),
            "connections": nodes[n][-1].get("connections"),
        }
        for n in boots
    }
    median_name = _median_name(sampler_names, ctl)
    shard_reads = []  # each sampler's shard reads a minute (its ShardWindow's; absent from older runs' lines)
    for name in sampler_names:
        if (w := _window(nodes[name], since)) is not None and "shards_read" in w[0]:
            shard_reads.append(_rate_per_min(*w, "shards_read"))
    doc["sampler_shard_reads_per_min"] = {"median": quantile(shard_reads, 0.5), "max": max(shard_reads, default=None)}
    sampler_calls = [calls[n] for n in sampler_names if n in calls]
    doc["control_calls_per_min"] = {
        "median_sampler": calls.get(median_name) if median_name else None,
        "median_of_samplers": statistics.median(sampler_calls) if sampler_calls else None,
        "busiest_node": calls.get(busiest) if busiest else None,
        "bootstrap": calls.get("bootstrap"),
    }
    doc["spread"] = spread(haves_all, sampler_names, since, end)
    if (w := _window(nodes.get("learner", []), since)) is not None:
        first, last = w
        dt = max(1e-9, last["t"] - first["t"])
        versions = sorted(set(last.get("versions", [])) | {h["v"] for h in haves if h["role"] == "learner"})
        published = [h for h in haves if h["role"] == "learner" and first["t"] <= h["t"] <= last["t"]]
        vbytes = last.get("version_bytes") or 0
        served = last.get("served", 0) - first.get("served", 0)

        def stale(r):
            return r.get("buffer", {}).get("stale", 0) + r.get("buffer", {}).get("aged_out", 0)

        def refused(r):
            return sum(v for k, v in r.get("statuses", {}).items() if k not in ("ok", "full", "duplicate")) + sum(
                v for k, v in r.get("rejected", {}).items() if k not in ("reward_hint_mismatch", "replayed_unchecked")
            )

        accepted = last.get("accepted", 0) - first.get("accepted", 0)
        wasted = stale(last) - stale(first) + refused(last) - refused(first)
        doc["learner"] = {
            "version_bytes": vbytes,
            "versions_published": len(published),
            "versions_total": len(versions),
            "upload_copies_per_version": served / (vbytes * len(published)) if vbytes and published else None,
            "steps_per_s": (last.get("steps", 0) - first.get("steps", 0)) / dt,
            "groups_per_s": accepted / dt,
            "busy_fraction": 1.0 - (last.get("idle_s", 0) - first.get("idle_s", 0)) / dt,
            "waste_fraction": wasted / accepted if accepted else None,
        }
        passed0, passed1 = first.get("passed_by", {}), last.get("passed_by", {})
        doc["learner"]["samplers_trained"] = sum(1 for p in passed1 if passed1[p] > passed0.get(p, 0))
    acked, ack_p99 = [], []
    for name in sampler_names:
        if (w := _window(nodes[name], since)) is not None:
            first, last = w
            acked.append((last.get("acked", 0) - first.get("acked", 0)) * 600.0 / max(1e-9, last["t"] - first["t"]))
            if last.get("ack_p99") is not None:
                ack_p99.append(last["ack_p99"])
    doc["per_sampler_acked_per_10min"] = {
        "min": min(acked, default=None),
        "median": quantile(acked, 0.5),
        "max": max(acked, default=None),
        "none": sum(1 for a in acked if a == 0),
    }
    doc["ack_p99_s"] = max(ack_p99, default=None)
    doc["version_lag"] = version_lag(haves_all, nodes, sampler_names, since, end)
    doc["sampler_states"] = sampler_states(nodes, sampler_names, since, end)
    doc["publisher_chunks"] = publisher_chunks(nodes, sampler_names, since)
    joins = [rows[-1].get("join_s") for n, rows in nodes.items() if roles[n] == "sampler" and rows[-1].get("join_s")]
    first_have = {}
    for h in haves:
        if h["role"] == "sampler":
            first_have[h["name"]] = min(first_have.get(h["name"], h["t"]), h["t"])
    doc["join"] = {"membership_s_p50": quantile(joins, 0.5), "membership_s_max": max(joins, default=None)}
    if started is not None and first_have:
        ready = [t - started for t in first_have.values()]
        doc["join"].update(first_version_s_p50=quantile(ready, 0.5), first_version_s_max=max(ready))
    if (w := _window(procs.get("boot", []), since)) is not None:
        first, last = w
        dt = max(1e-9, last["t"] - first["t"])
        boot_rows = nodes.get("bootstrap", [])
        doc["bootstrap"] = {
            "cpu_cores": (last["cpu_s"] + last["p2pd_cpu_s"] - first["cpu_s"] - first["p2pd_cpu_s"]) / dt,
            "rss_mb": (last["rss"] + last["p2pd_rss"]) / 1e6,
            "connections": boot_rows[-1].get("connections") if boot_rows else None,
        }
    for name, row in doc["bootstraps"].items():  # each bootstrap's process: host `boot`, `boot2`, ...
        if (w := _window(procs.get(name.replace("bootstrap", "boot"), []), since)) is not None:
            first, last = w
            row["cpu_cores"] = (last["cpu_s"] + last["p2pd_cpu_s"] - first["cpu_s"] - first["p2pd_cpu_s"]) / max(
                1e-9, last["t"] - first["t"]
            )
            row["rss_mb"] = (last["rss"] + last["p2pd_rss"]) / 1e6
    total_cpu, total_rss = 0.0, 0.0
    for _host, rows in procs.items():
        if (w := _window(rows, since)) is not None:
            first, last = w
            total_cpu += (last["cpu_s"] + last["p2pd_cpu_s"] - first["cpu_s"] - first["p2pd_cpu_s"]) / max(
                1e-9, last["t"] - first["t"]
            )
            total_rss += last["rss"] + last["p2pd_rss"]
    sampler_hosts = [rows[-1] for h, rows in procs.items() if h.startswith("h")]
    doc["lab"] = {
        "cpu_cores": total_cpu,
        "rss_gb": total_rss / 1e9,
        "processes": len(procs),
        "p2pd": sum(r["p2pd"] for r in (rows[-1] for rows in procs.values())),
        "sampler_host_rss_mb": [round((r["rss"]) / 1e6) for r in sampler_hosts],
    }
    return doc
