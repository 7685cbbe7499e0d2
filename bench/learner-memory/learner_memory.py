"""Peak memory and time of one GEPO learner step on Qwen3 architectures, beside the estimator's figure.

Cells: model (Qwen3-0.6B / 1.7B / 4B: real dimensions and the 151,936-token vocabulary, random weights, nothing
downloaded) x completion length x full or LoRA training x the old full-logits log-prob path or the chunked one.
Every cell runs in a fresh subprocess. On CPU it reports the peak RSS of that process minus its RSS after imports
(`ru_maxrss`); with `--device cuda`, `torch.cuda.max_memory_allocated`. A cell measures the first step (AdamW's
m and v are allocated by it), so it is compared with the estimator's first-step figure; the steady-state figure
(what `swarmnode hardware` uses) is printed beside it. One step: rows of a 64-token prompt and a
completion, forward (under the learner's precision), GEPO loss, backward, gradient clipping, AdamW step;
activation checkpointing on, as the presets.
`--logits` cells measure the log-prob path alone (a frozen lm_head and the log-softmax over N tokens, forward and
backward) for the old path and the chunked one.

    python bench/learner-memory/learner_memory.py --cells 0.6B:1024:full:old 0.6B:1024:full:chunked --logits 1024 2048
    python bench/learner-memory/learner_memory.py --device cuda --all          # every cell (needs a GPU)

Writes bench/learner-memory/results/learner_memory.json and .md (`--out` to change).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ARCHS = {  # published config.json of each model (all tie their embeddings)
    "0.6B": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
    ),
    "1.7B": dict(
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
    ),
    "4B": dict(
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
    ),
}
VOCAB = 151_936
PROMPT_TOKENS = 64
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import ROOT  # noqa: E402  (also puts this checkout's package first on sys.path)


def hf_config(model: str):
    from transformers import Qwen3Config

    return Qwen3Config(**ARCHS[model], vocab_size=VOCAB, tie_word_embeddings=True, max_position_embeddings=40960)


def node_config(model: str, completion: int, mode: str, rows: int, device: str, checkpointing: bool = True):
    """The NodeConfig a learner of this cell would run with (what the estimator reads)."""
    from swarmnode.config import load_config

    return load_config(
        None,
        [
            f"model.dtype={'bfloat16' if device == 'cuda' else 'float32'}",
            f"model.gradient_checkpointing={str(checkpointing).lower()}",
            f"sampler.max_prompt_length={PROMPT_TOKENS}",
            f"sampler.max_completion_length={completion}",
            # one micro-batch of `rows` sequences (G is at least 2: one row is G=2 over 2 accumulation steps)
            f"sampler.num_generations={max(2, rows)}",
            "learner.prompts_per_step=1",
            f"learner.gradient_accumulation_steps={2 if rows == 1 else 1}",
            f"learner.lora.enabled={str(mode == 'lora').lower()}",
            "learner.lora.r=16",
        ],
    )


def estimate(model: str, completion: int, mode: str, path: str, rows: int, device: str, checkpointing: bool) -> dict:
    from swarmnode.learner.memory import ModelShape, training_memory
    from swarmnode.model.models import estimate_parameters

    hf = hf_config(model)
    shape = ModelShape.from_hf_config(hf, estimate_parameters(hf))
    cfg = node_config(model, completion, mode, rows, device, checkpointing)
    return training_memory(shape, cfg, device, "full" if path == "old" else path).to_dict()


def _peak_bytes(device: str, baseline: int) -> int:
    import torch

    if device == "cuda":
        return int(torch.cuda.max_memory_allocated())
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - baseline


def old_logprobs(model, ids, attn, position_ids, T, temps):
    """The log-prob path of swarmnode before the chunked one (main at 71e463b): [B, T+1, V] logits."""
    import torch

    out = model(input_ids=ids, attention_mask=attn, position_ids=position_ids, logits_to_keep=T + 1, use_cache=False)
    logits = out.logits[:, :-1, :].float() / temps.view(-1, 1, 1)
    picked = logits.gather(-1, ids[:, -T:].unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def run_step_cell(
    model_name: str, completion: int, mode: str, path: str, rows: int, device: str, checkpointing: bool
) -> dict:
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    from transformers import Qwen3ForCausalLM

    from swarmnode.learner.losses import policy_loss
    from swarmnode.learner.precision import Precision
    from swarmnode.model.logprobs import completion_scores, pad_batch

    cfg = node_config(model_name, completion, mode, rows, device, checkpointing)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(hf_config(model_name)).to(torch.bfloat16 if device == "cuda" else torch.float32)
    if checkpointing:
        model.activation_checkpointing_enable()
    if mode == "lora":
        from swarmnode.learner.lora import apply_lora

        model = apply_lora(model, cfg.learner.lora)
    precision = Precision.from_config(cfg, device)
    precision.prepare(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6)
    model.train()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, VOCAB, (PROMPT_TOKENS,), generator=g).tolist() for _ in range(rows)]
    completions = [torch.randint(0, VOCAB, (completion,), generator=g).tolist() for _ in range(rows)]
    start = time.perf_counter()
    with precision.autocast():
        if path == "chunked":
            scores = completion_scores(model, prompts, completions, 1.0, 0)
            logp, mask = scores.logp, scores.mask
        else:
            ids, attn, mask, T = pad_batch(prompts, completions, 0)
            ids, attn, mask = ids.to(device), attn.to(device), mask.to(device)
            logp = old_logprobs(model, ids, attn, (attn.cumsum(1) - 1).clamp(min=0), T, torch.ones(rows, device=device))
    logq = (logp.detach() - 0.01 * torch.rand(logp.shape, generator=g).to(device)) * mask
    rewards = torch.tensor([float(i % 2) for i in range(rows)], device=device)
    loss, _ = policy_loss(
        "gepo", logp, logq, mask, rewards, torch.zeros(rows, dtype=torch.long, device=device), cfg.learner
    )
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"measured_bytes": _peak_bytes(device, baseline), "seconds": seconds}


def run_logits_cell(tokens: int, path: str, device: str, hidden: int = 1024) -> dict:
    """The log-prob path alone: hidden [tokens, H] (with grad) through a frozen lm_head [V, H] (as under LoRA; in
    full training both paths add the same [V, H] weight gradient), forward and backward."""
    import torch

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    g = torch.Generator().manual_seed(0)
    # filled in place: no transient copy may raise the high-water mark above the baseline taken below
    h = torch.empty(1, tokens, hidden).normal_(0, 0.05, generator=g).to(device).requires_grad_()
    w = torch.empty(VOCAB, hidden).normal_(0, 0.05, generator=g).to(device)
    targets = torch.randint(0, VOCAB, (1, tokens), generator=g).to(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    logp = logits_path_logprobs(path, h, w, targets)
    logp.sum().backward()
    seconds = time.perf_counter() - start
    peak = _peak_bytes(device, baseline) - (before if device == "cuda" else 0)
    return {"measured_bytes": peak, "seconds": seconds, "logp_sum": float(logp.detach().sum())}


def logits_path_logprobs(path: str, h, w, targets):
    """Per-token log-probs [1, N] of `targets` under softmax(h @ w.T) by one of the compared implementations."""
    import torch

    if path == "old":
        logits = (h @ w.t()).float()
        return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    if path == "chunked":
        from swarmnode.model.logprobs import ChunkedLMHeadLogProbs

        n = h.shape[1]
        logp, _ = ChunkedLMHeadLogProbs.apply(h[0], w, None, targets[0], torch.ones(n, device=h.device), *_chunks())
        return logp[None]
    if path == "trl":
        _trl_without_trainer_deps()
        from trl.kernels.chunked_logprob import ChunkedLogProbFunction

        logp = ChunkedLogProbFunction.apply(h[0], w, None, targets[0], 1.0, _chunks()[1], None, 1.0, ())[0]
        return logp[None]
    raise ValueError(f"unknown path {path!r}")


def _trl_without_trainer_deps() -> None:
    """TRL's backward imports `maybe_gather_lm_head_ctx` from trl.trainer.utils (which needs pandas and datasets)
    only to gather DeepSpeed ZeRO-3 shards; without ZeRO-3 it is a null context, which this provides instead."""
    import contextlib
    import types

    if "trl.trainer.utils" not in sys.modules:
        stub = types.ModuleType("trl.trainer.utils")
        stub.maybe_gather_lm_head_ctx = lambda *params: contextlib.nullcontext()
        sys.modules["trl.trainer.utils"] = stub


def _chunks() -> tuple[int, int]:
    from swarmnode.model.logprobs import TOKEN_CHUNK, VOCAB_CHUNK

    return TOKEN_CHUNK, VOCAB_CHUNK


def subprocess_cell(spec: dict, timeout: float) -> dict:
    """Run one cell in a fresh interpreter; its JSON result (or the error)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--run-cell", json.dumps(spec)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {**spec, "error": f"exit {done.returncode}: {tail}"}
    return {**spec, **json.loads(lines[-1])}


def _gib(n: float) -> str:
    return f"{n / 1024**3:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--cells", nargs="*", default=[], help="MODEL:COMPLETION:full|lora:old|chunked")
    ap.add_argument("--all", action="store_true", help="every model x 1024/4096 x full/lora x old/chunked")
    ap.add_argument("--rows", type=int, default=None, help="completions per step (default 8 on cuda, 1 on cpu)")
    ap.add_argument("--logits", nargs="*", type=int, default=[], help="token counts for the log-prob-path cells")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--no-checkpointing", action="store_true", help="without activation checkpointing")
    ap.add_argument("--out", default=str(ROOT / "bench" / "learner-memory" / "results" / "learner_memory"))
    ap.add_argument("--run-cell", help=argparse.SUPPRESS)
    ap.add_argument("--reestimate", action="store_true", help="recompute the estimates of the saved --out results")
    args = ap.parse_args()
    if args.reestimate:  # the estimator changed: same measurements, new estimates
        record = json.loads(Path(args.out + ".json").read_text())
        for r in record["results"]:
            if r["kind"] == "step":
                r["estimate"] = estimate(
                    r["model"], r["completion"], r["mode"], r["path"], r["rows"], r["device"], r["checkpointing"]
                )
                if "measured_bytes" in r:
                    r["estimate_ratio"] = r["estimate"]["first_step"] / r["measured_bytes"]
        Path(args.out + ".json").write_text(json.dumps(record, indent=1))
        Path(args.out + ".md").write_text(markdown(record))
        print(markdown(record))
        return
    if args.run_cell:
        spec = json.loads(args.run_cell)
        if spec["kind"] == "logits":
            print(json.dumps(run_logits_cell(spec["tokens"], spec["path"], spec["device"])))
        else:
            print(
                json.dumps(
                    run_step_cell(
                        spec["model"],
                        spec["completion"],
                        spec["mode"],
                        spec["path"],
                        spec["rows"],
                        spec["device"],
                        spec["checkpointing"],
                    )
                )
            )
        return
    rows = args.rows or (8 if args.device == "cuda" else 1)
    cells = args.cells
    if args.all:
        cells = [
            f"{m}:{c}:{mode}:{p}"
            for m in ARCHS
            for c in (1024, 4096)
            for mode in ("full", "lora")
            for p in ("old", "chunked")
        ]
    results = []
    for tokens in args.logits:
        for path in ("old", "chunked"):
            out = subprocess_cell(dict(kind="logits", tokens=tokens, path=path, device=args.device), args.timeout)
            results.append(out)
            print(json.dumps(out), flush=True)
            _save(args, rows, results)
    for cell in cells:
        model, completion, mode, path = cell.split(":")
        spec = dict(
            kind="step",
            model=model,
            completion=int(completion),
            mode=mode,
            path=path,
            rows=rows,
            device=args.device,
            checkpointing=not args.no_checkpointing,
        )
        out = subprocess_cell(spec, args.timeout)
        out["estimate"] = estimate(model, int(completion), mode, path, rows, args.device, spec["checkpointing"])
        if "measured_bytes" in out:
            out["estimate_ratio"] = out["estimate"]["first_step"] / out["measured_bytes"]
        results.append(out)
        print(
            json.dumps({k: v for k, v in out.items() if k != "estimate"} | {"estimate": out["estimate"]["total"]}),
            flush=True,
        )
        _save(args, rows, results)
    print(markdown(_save(args, rows, results)))


def _save(args, rows: int, results: list[dict]) -> dict:
    """Write what is measured so far (a long run keeps its finished cells)."""
    record = {
        "device": args.device,
        "rows": rows,
        "load_average": os.getloadavg(),
        "argv": sys.argv[1:],
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(record, indent=1))
    Path(args.out + ".md").write_text(markdown(record))
    return record


def markdown(record: dict) -> str:
    unit = "peak RSS above the process's own baseline" if record["device"] == "cpu" else "max_memory_allocated"
    lines = [
        f"Device {record['device']} ({unit}), {record['rows']} completions per step, load average "
        f"{record['load_average'][0]:.1f}; command: python bench/learner-memory/learner_memory.py {' '.join(record['argv'])}",
        "",
        "| model | completion | training | checkpointing | log-probs | measured GiB | estimate GiB (first "
        "step) | est/meas | steady-state estimate GiB | s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record["results"]:
        if r["kind"] != "step":
            continue
        meas = _gib(r["measured_bytes"]) if "measured_bytes" in r else r.get("error", "?")
        ratio = f"{r['estimate_ratio']:.2f}" if "estimate_ratio" in r else "-"
        secs = f"{r['seconds']:.0f}" if "seconds" in r else "-"
        ckpt = "on" if r.get("checkpointing", True) else "off"
        lines.append(
            f"| Qwen3-{r['model']} | {r['completion']} | {r['mode']} | {ckpt} | {r['path']} | {meas} | "
            f"{_gib(r['estimate']['first_step'])} | {ratio} | {_gib(r['estimate']['total'])} | {secs} |"
        )
    logit_rows = [r for r in record["results"] if r["kind"] == "logits"]
    if logit_rows:
        lines += [
            "",
            "Log-prob path alone (frozen lm_head 151,936 x 1,024, forward + backward; memory above the inputs):",
            "",
            "| tokens | path | measured GiB | s |",
            "|---|---|---|---|",
        ]
        for r in logit_rows:
            meas = _gib(r["measured_bytes"]) if "measured_bytes" in r else r.get("error", "?")
            lines.append(f"| {r['tokens']} | {r['path']} | {meas} | {r.get('seconds', 0):.1f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
