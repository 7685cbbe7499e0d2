"""swarmnode's chunked log-prob path against TRL's (trl.kernels.chunked_logprob) on the same tensors.

Same hidden states [N, 1024], the same frozen 151,936 x 1,024 head, the same targets and vocabulary chunk; forward
and backward (gradient with respect to the hidden states). Reports, per N: the largest difference of the
log-probs and of the gradients, the time ratio (median of interleaved repeats in one process) and the peak-memory
ratio (each path in its own fresh process, as bench/learner-memory/learner_memory.py measures). TRL is needed only here:
`pip install --no-deps trl` (its other dependencies are not used by this module, and torch must not change).

    python bench/learner-memory/logprob_vs_trl.py [--tokens 512 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learner_memory import ROOT, logits_path_logprobs, subprocess_cell  # noqa: E402


def compare_in_process(tokens: int, repeats: int, hidden: int = 1024) -> dict:
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    g = torch.Generator().manual_seed(0)
    h = torch.empty(1, tokens, hidden).normal_(0, 0.05, generator=g).requires_grad_()
    w = torch.empty(151_936, hidden).normal_(0, 0.05, generator=g)
    targets = torch.randint(0, 151_936, (1, tokens), generator=g)
    times: dict[str, list[float]] = {"chunked": [], "trl": []}
    outputs = {}
    for _ in range(repeats):
        for path in times:
            h.grad = None
            start = time.perf_counter()
            logp = logits_path_logprobs(path, h, w, targets)
            logp.sum().backward()
            times[path].append(time.perf_counter() - start)
            outputs[path] = (logp.detach(), h.grad.clone())
    ours, trl = outputs["chunked"], outputs["trl"]
    return {
        "tokens": tokens,
        "max_abs_logp_diff": float((ours[0] - trl[0]).abs().max()),
        "max_abs_grad_diff": float((ours[1] - trl[1]).abs().max()),
        "seconds_chunked": statistics.median(times["chunked"]),
        "seconds_trl": statistics.median(times["trl"]),
        "time_ratio_chunked_over_trl": statistics.median(times["chunked"]) / statistics.median(times["trl"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", nargs="*", type=int, default=[512, 1024])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "learner-memory" / "results" / "logprob_vs_trl"))
    ap.add_argument("--in-process", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.in_process:
        print(json.dumps(compare_in_process(args.in_process, args.repeats)))
        return
    import subprocess

    rows = []
    for tokens in args.tokens:
        done = subprocess.run(
            [sys.executable, __file__, "--in-process", str(tokens), "--repeats", str(args.repeats)],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            last = (done.stderr.strip().splitlines() or ["?"])[-1]
            sys.exit(f"error: the timing run for {tokens} tokens failed: {last}")
        row = json.loads(lines[-1])
        for path in ("chunked", "trl"):
            mem = subprocess_cell(dict(kind="logits", tokens=tokens, path=path, device="cpu"), 3600)
            row[f"peak_bytes_{path}"] = mem.get("measured_bytes")
        if row["peak_bytes_chunked"] and row["peak_bytes_trl"]:
            row["memory_ratio_chunked_over_trl"] = row["peak_bytes_chunked"] / row["peak_bytes_trl"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    record = {"load_average": os.getloadavg(), "argv": sys.argv[1:], "results": rows}
    Path(args.out + ".json").write_text(json.dumps(record, indent=1))
    lines = [
        f"CPU, load average {record['load_average'][0]:.1f}; command: python bench/learner-memory/logprob_vs_trl.py "
        f"{' '.join(record['argv'])}",
        "",
        "| tokens | time ours / TRL | peak memory ours / TRL (MiB) | max abs diff logp / grad |",
        "|---|---|---|---|",
    ]
    for r in rows:
        mem = (
            f"{r.get('memory_ratio_chunked_over_trl', float('nan')):.2f} "
            f"({(r['peak_bytes_chunked'] or 0) / 2**20:.0f} / {(r['peak_bytes_trl'] or 0) / 2**20:.0f})"
        )
        lines.append(
            f"| {r['tokens']} | {r['time_ratio_chunked_over_trl']:.2f} | {mem} | "
            f"{r['max_abs_logp_diff']:.1e} / {r['max_abs_grad_diff']:.1e} |"
        )
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
