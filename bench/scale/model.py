"""A model of a run's per-node costs from 8 to 10,000 nodes, driven by what the scale lab measured.

    python bench/scale/model.py bench/scale/results/lab.json [--markdown]

Each figure has a structural form (why it grows as it does) whose coefficients are fitted by least squares to
the lab's measured points; the fit leaves out the largest N measured and predicts it (`check`: the error there,
the goal is within 25 %). The forms, with the peer records in one DHT key (`<run>/peers`) read whole:

| figure | form | why |
|---|---|---|
| median node's control bytes/min | a + b N | every sampler reads all N records every 5th refresh; its share of serving the DHT grows with N |
| busiest node's control bytes/min | a + b N + c N^2 | the few nodes nearest the peers key take N stores per beat and answer every read with N records |
| bootstrap's control bytes/min | a + b N + c N^2 | it is one of those nodes in a small run, and every new node asks it first |
| version p95 spread, s | a + b log2 N | rarest-first: holders double each round |
| status snapshot, s and bytes | a + b N | one read of N records, each signature checked |
| bootstrap connections | a + b N, at most 512 | every node keeps one, until p2pd's connection manager trims |

With the records sharded over keys and each node reading a bounded part (`--design sharded`) status becomes a
bounded census (measured over 10,000 records in bench/status-scale, not fitted), and the control bytes of the
median node, the busiest node and the bootstrap are modelled as what the lab counts them to be, DHT calls a minute
x bytes a call (`per_call`), with k the results' `network.dht_bucket_size` (20 where a result does not say):

| factor | form | why |
|---|---|---|
| bytes a call | h + p min(N - 1, k) | a find reply lists, for each key asked, the nearest peers the answerer knows: every other node while the run is smaller than k, then k. p is one listed peer (node id + peer id, ~62 B) times the keys a call asks |
| calls a minute | the lab's median, grown past the sizes measured as `dht_lookup.py` counts a lookup's calls grow (`--lookup`: a + b log2 N past k); without it x log2 N / log2(k + 1) | set by the node's timers (heartbeat stores, refresh reads) and the machine's load, not by N; a lookup asks about k nodes and a hop more as the run doubles |

The held-out check fits h and p without the largest N (the two largest, given four sizes or more) and predicts
their bytes from their measured calls: the bytes' growth with N is the model's, the load's calls are the
measurement's. (Forms of the total bytes in N alone, a + b log2 N, missed the largest point by 46-62 %: below k
nodes a reply grows with every node that joins.)
`limits()` names, at each N, the first resource to run out and the setting that moves it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

HEARTBEAT_S = 5.0
MAX_SUBKEYS_PER_KEY = 1024  # swarmnode.swarm.dht_storage: subkeys one DHT node keeps under one key
MAX_BYTES_PER_KEY = 512 << 10  # ... and bytes
P2PD_REPLY_CAP = 4 << 20  # one unary reply (hivemind DEFAULT_MAX_MSG_SIZE)
HOME_UPLINK_BYTES_PER_MIN = 20e6 / 8 * 60  # a volunteer's 20 Mbit/s uplink
CONTROL_SHARE = 0.10  # control traffic may take at most this share of an uplink before it hurts training
FD_LIMIT = 1024  # a default `ulimit -n`: one process's open connections before raising it
CONN_HIGH_WATER = 512  # p2pd's connection manager (hivemind starts it with connManager on) trims above this
SCALES = (8, 16, 32, 64, 128, 1000, 10_000)
BUCKET = 20  # hivemind's bucket_size, the k of results that do not say theirs (network.dht_bucket_size since)
LOOKUP_OPS = ("store", "read_key", "read_8_shards")  # dht_lookup.py's operations: one of each is the growth's unit
PER_CALL = {"median": "median_sampler", "busiest": "busiest_node", "bootstrap": "bootstrap"}  # figure -> results key

Basis = Callable[[np.ndarray], list[np.ndarray]]
FORMS: dict[str, Basis] = {
    "linear": lambda n: [np.ones_like(n), n],
    "quadratic": lambda n: [np.ones_like(n), n, n**2],
    "log": lambda n: [np.ones_like(n), np.log2(n)],
}


def bucket_basis(k: int) -> Basis:
    """Bytes a call: a constant and the find reply's neighbour list, min(N - 1, k) peers."""
    return lambda n: [np.ones_like(n), np.minimum(n - 1, k)]


def basis(form: str) -> Basis:
    """The basis functions of `form` ("bucket" or "bucket:K" for a k of K)."""
    if form.startswith("bucket"):
        return bucket_basis(int(form.split(":")[1]) if ":" in form else BUCKET)
    return FORMS[form]


ONE_KEY = {
    "median": "linear",
    "busiest": "quadratic",
    "bootstrap": "quadratic",
    "spread_p95": "log",
    "status_s": "linear",
    "status_bytes": "linear",
    "connections": "linear",
}
SHARDED = {
    **ONE_KEY,
    "median": "per_call",
    "busiest": "per_call",
    "bootstrap": "per_call",
    "status_bytes": None,
    "status_s": None,  # sharded status reads a bounded census: measured over 10,000 records, not fitted
    "spread_p95": None,
}  # the lab's spreads are its CPU's (load 24-150 past 16 samplers): not fitted


def fit(ns: list[float], ys: list[float], form: str) -> np.ndarray:
    """Least-squares coefficients of `form` through the points. A quadratic through fewer than 3 points, or one
    that would bend down (no cause for a fall at large N), is fitted as a line (its N^2 coefficient 0)."""
    n, y = np.asarray(ns, float), np.asarray(ys, float)
    if form == "quadratic" and len(ns) >= 3:
        coef, *_ = np.linalg.lstsq(np.stack(basis(form)(n), axis=1), y, rcond=None)
        if coef[2] >= 0:
            return coef
    if form == "quadratic":
        return np.append(fit(ns, ys, "linear"), 0.0)
    coef, *_ = np.linalg.lstsq(np.stack(basis(form)(n), axis=1), y, rcond=None)
    return coef


def predict(coef: np.ndarray, form: str, n: float) -> float:
    """The fitted value at `n` nodes."""
    return float(sum(c * b for c, b in zip(coef, basis(form)(np.array(float(n))))))


def measured_points(results: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """(N, value) per figure from the lab's result documents (N counts every node: samplers + learner +
    bootstrap)."""
    out: dict[str, list[tuple[int, float]]] = {k: [] for k in ONE_KEY}
    for doc in results:
        n = doc.get("samplers_working", doc["samplers"]) + 2  # samplers whose node started, learner, bootstrap
        ctl, status = doc.get("control_bytes_per_min", {}), doc.get("status", {})
        for key, value in (
            ("median", ctl.get("median_sampler")),
            ("busiest", ctl.get("busiest_node")),
            ("bootstrap", ctl.get("bootstrap")),
            ("spread_p95", doc.get("spread", {}).get("p95_s")),
            ("status_s", status.get("read_s")),
            ("status_bytes", status.get("bytes_in")),
            ("connections", (doc.get("bootstrap") or {}).get("connections")),
        ):
            if value is not None and math.isfinite(value):
                out[key].append((n, float(value)))
    return out


def calls_per_min(doc: dict, field: str) -> float | None:
    """DHT calls a minute of a results document's `field` (a `PER_CALL` key). The median node's bytes are taken as
    the samplers' median calls x bytes a call (that node's own calls carry its own bytes a call, one node's
    noise); documents from before `median_of_samplers` give that node's calls."""
    calls = doc.get("control_calls_per_min") or {}
    return (calls.get("median_of_samplers") or calls.get(field)) if field == "median_sampler" else calls.get(field)


def per_call_points(results: list[dict]) -> dict[str, list[tuple[int, float, float]]]:
    """(N, DHT calls a minute, control bytes a minute) per figure of `PER_CALL`, where the lab counted calls."""
    out: dict[str, list[tuple[int, float, float]]] = {k: [] for k in PER_CALL}
    for doc in results:
        n = doc.get("samplers_working", doc["samplers"]) + 2
        ctl = doc.get("control_bytes_per_min", {})
        for key, field in PER_CALL.items():
            if (called := calls_per_min(doc, field)) and ctl.get(field):
                out[key].append((n, float(called), float(ctl[field])))
    return {k: sorted(v) for k, v in out.items()}


def listed_peer_bytes() -> int:
    """Bytes one listed peer adds to a find reply (a `FindResult`'s node id and peer id, hivemind's protobuf)."""
    from hivemind.dht.routing import DHTID
    from hivemind.proto import dht_pb2

    peer = bytes(38)  # an Ed25519 peer id: multihash identity of the 36-byte public key
    one = dht_pb2.FindResult(nearest_node_ids=[DHTID.generate().to_bytes()], nearest_peer_ids=[peer])
    return one.ByteSize() - dht_pb2.FindResult().ByteSize()


def lookup_growth(rows: list[dict], k: int) -> Callable[[float], float] | None:
    """Calls per operation at N nodes, fitted as a + b log2 N through `dht_lookup.py`'s rows of bucket `k` past
    one bucket (one store, one key read and one 8-shard read together); None without two such rows."""
    pts = [(r["nodes"], sum(r[op]["calls"] for op in LOOKUP_OPS)) for r in rows if r["bucket"] == k and r["nodes"] > k]
    if len(pts) < 2:
        return None
    coef = fit([p[0] for p in pts], [p[1] for p in pts], "log")
    return lambda n: predict(coef, "log", max(n, k + 1))


def calls_at(
    n: float, calls: list[tuple[int, float]], k: int = BUCKET, growth: Callable[[float], float] | None = None
) -> float:
    """DHT calls a minute at `n` nodes: the median measured (at sizes `calls`: (N, calls a minute)), grown with a
    lookup's calls from the median size measured to `n` (`growth`, measured in a DHT of up to 80 nodes; without
    it, log2 N / log2(k + 1) past one bucket)."""
    base = float(np.median([c for _, c in calls]))
    if growth is None:
        return base * max(1.0, math.log2(n) / math.log2(k + 1))
    at = float(np.median([m for m, _ in calls]))
    return base * max(1.0, growth(n) / growth(at)) if n > at else base


def _per_call(key: str, pts: list[tuple[int, float, float]], model: dict, checks: dict, k: int) -> None:
    """Fit bytes a call (the `bucket` form) and its held-out check (the largest N's bytes from its own calls)."""
    ns, per, form = [p[0] for p in pts], [p[2] / p[1] for p in pts], f"bucket:{k}"
    model[key] = ("per_call", fit(ns, per, form), [(p[0], p[1]) for p in pts], k)
    held_out = 2 if len({p[0] for p in pts}) >= 4 else 1  # the two largest sizes where the fit has 2 left
    if len({p[0] for p in pts}) >= 3:
        held = fit(ns[:-held_out], per[:-held_out], form)
        for i, (n, calls, real) in enumerate(pts[-held_out:]):
            guess = calls * predict(held, form, n)
            name = key if i == held_out - 1 else f"{key} (N = {n})"
            checks[name] = {"n": n, "measured": real, "predicted": guess, "error": (guess - real) / real}


def _value(entry: tuple, n: float, growth: Callable[[float], float] | None) -> float:
    form, coef = entry[0], entry[1]
    if form == "per_call":
        k = entry[3]
        return calls_at(n, entry[2], k, growth) * predict(coef, f"bucket:{k}", n)
    return predict(coef, form, n)


def bucket_of(results: list[dict]) -> int:
    """The k the results were measured with (one for all of them)."""
    ks = {doc.get("dht_bucket_size", BUCKET) for doc in results}
    if len(ks) != 1:
        raise SystemExit(f"results of different DHT bucket sizes {sorted(ks)}: model one at a time")
    return ks.pop()


def build(results: list[dict], design: dict[str, str] = ONE_KEY, lookup: list[dict] | None = None) -> dict:
    """Fitted coefficients, the held-out check at the largest N, and the table to 10,000 (`lookup`: the rows of
    `dht_lookup.py`, for the calls' growth past the sizes measured)."""
    k = bucket_of(results)
    growth = lookup_growth(lookup or [], k)
    points = measured_points(results)
    model, checks = {}, {}
    per_call = per_call_points(results)
    for key, pts in points.items():
        if design[key] == "per_call":
            if len(per_call[key]) >= 2:
                _per_call(key, per_call[key], model, checks, k)
            continue
        if len(pts) < 2 or design[key] is None:
            continue
        pts = sorted(pts)
        form = design[key]
        model[key] = (form, fit([p[0] for p in pts], [p[1] for p in pts], form), [])
        if len(pts) >= 3:
            held = fit([p[0] for p in pts[:-1]], [p[1] for p in pts[:-1]], form)
            n, real = pts[-1]
            guess = predict(held, form, n)
            checks[key] = {
                "n": n,
                "measured": real,
                "predicted": guess,
                "error": (guess - real) / real if real else None,
            }
    table = [{"n": n, **{key: max(0.0, _value(entry, n, growth)) for key, entry in model.items()}} for n in SCALES]
    for row in table:  # the connection manager trims a node's connections to its low water above the high
        if "connections" in row:
            row["connections"] = min(row["connections"], CONN_HIGH_WATER)
    return {
        "design": design,
        "bucket": k,
        "calls_growth": "measured" if growth else "log2 N / log2(k + 1)",
        "points": points,
        "per_call_points": per_call,
        "coefficients": {k: [e[0], list(map(float, e[1]))] for k, e in model.items()},
        "check": checks,
        "table": table,
    }


def limits(row: dict, record_bytes: float, shards: int = 1) -> list[str]:
    """The resources a run of `row["n"]` nodes exhausts, most pressing first, each with the setting that moves it
    (`shards`: the keys the peer records are spread over)."""
    n, out = row["n"], []
    per_key = -(-n // shards)
    if per_key > MAX_SUBKEYS_PER_KEY or per_key * record_bytes > MAX_BYTES_PER_KEY:
        out.append(
            f"the peers key: {per_key} records x {record_bytes:.0f} B > a DHT node's cap "
            f"({MAX_SUBKEYS_PER_KEY} subkeys, {MAX_BYTES_PER_KEY >> 10} KiB): newer members' records are "
            "refused and invisible (more shards: network.peer_shards)"
        )
    if shards == 1 and n * record_bytes > P2PD_REPLY_CAP:
        out.append("one read of the whole run exceeds p2pd's 4 MiB reply: status fails (read shards, census)")
    boot = row.get("bootstrap")
    if boot is not None and boot > CONTROL_SHARE * HOME_UPLINK_BYTES_PER_MIN and boot >= row.get("busiest", 0):
        out.append(
            f"the bootstrap's control traffic {boot / 1e6:,.0f} MB/min > 10 % of a 20 Mbit/s uplink (more "
            "bootstraps in network.initial_peers; a bootstrap on a faster link)"
        )
    busiest = row.get("busiest")
    if busiest is not None and busiest > CONTROL_SHARE * HOME_UPLINK_BYTES_PER_MIN:
        out.append(
            f"the busiest node's control traffic {busiest / 1e6:.0f} MB/min > 10 % of a 20 Mbit/s uplink "
            "(more shards; a longer network.heartbeat_interval)"
        )
    if row.get("connections", 0) > FD_LIMIT:
        out.append(
            f"the bootstrap's {row['connections']:.0f} connections > {FD_LIMIT} open files (more "
            "bootstraps; raise ulimit -n)"
        )
    if row.get("status_s", 0) > 10:
        out.append(f"status takes {row['status_s']:.0f} s (a census from sampled shards)")
    return out or ["none of the modelled limits"]


def markdown(doc: dict, record_bytes: float, shards: int = 1) -> str:
    """The table to 10,000 nodes and the held-out checks, as Markdown."""
    cols = [
        ("median", "median B/min", "{:,.0f}", 1),
        ("busiest", "busiest B/min", "{:,.0f}", 1),
        ("bootstrap", "bootstrap B/min", "{:,.0f}", 1),
        ("spread_p95", "p95 spread s", "{:,.1f}", 1),
        ("status_s", "status s", "{:,.1f}", 1),
        ("status_bytes", "status KB", "{:,.0f}", 1e3),
        ("connections", "bootstrap conns", "{:,.0f}", 1),
    ]
    lines = ["| N | " + " | ".join(c[1] for c in cols) + " | first limit |", "|---" * (len(cols) + 2) + "|"]
    for row in doc["table"]:
        cells = [fmt.format(row[key] / scale) if key in row else "-" for key, _, fmt, scale in cols]
        lines.append(f"| {row['n']:,} | " + " | ".join(cells) + f" | {limits(row, record_bytes, shards)[0]} |")
    lines += ["", "| figure | form | N checked | measured | predicted | error |", "|---|---|---|---|---|---|"]
    for key, c in doc["check"].items():
        err = f"{100 * c['error']:+.0f} %" if c["error"] is not None else "-"
        lines.append(
            f"| {key.split(' ')[0]} | {doc['design'][key.split(' ')[0]]} | {c['n']} | {c['measured']:,.2f} | {c['predicted']:,.2f} | "
            f"{err} |"
        )
    return "\n".join(lines)


def record_bytes_of(lines: list[dict]) -> float:
    """Bytes of one heartbeat store on the wire (request + reply), as the bootstrap's `rpc_store` handler counted
    them: its calls are almost all other nodes' heartbeats and announcements."""
    rows = [ln for ln in lines if ln.get("ev") == "node" and ln.get("role") == "bootstrap"]
    if not rows:
        return 800.0
    store = rows[-1]["handles"].get("DHTProtocol.rpc_store", [0, 0, 0])
    return (store[0] + store[1]) / max(1, store[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+", help="lab.py --json output(s)")
    ap.add_argument("--design", choices=("one-key", "sharded"), default="one-key")
    ap.add_argument(
        "--record-bytes",
        type=float,
        default=800.0,
        help="one heartbeat store's bytes (curves' bootstrap rpc_store mean; measured 0.74-0.81 KB)",
    )
    ap.add_argument("--shards", type=int, default=64, help="network.peer_shards of the sharded design")
    ap.add_argument("--lookup", type=Path, help="dht_lookup.py --json output: the calls' growth past the lab's sizes")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = [d for p in args.results for d in json.loads(p.read_text())]
    lookup = json.loads(args.lookup.read_text())["rows"] if args.lookup else None
    doc = build(results, ONE_KEY if args.design == "one-key" else SHARDED, lookup)
    rb = args.record_bytes
    doc["record_bytes"] = rb
    shards = 1 if args.design == "one-key" else args.shards
    doc["limits"] = {row["n"]: limits(row, rb, shards) for row in doc["table"]}
    print(markdown(doc, rb, shards))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main()
