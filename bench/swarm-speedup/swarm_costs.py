"""Where the swarm's cost per step goes, beyond the single process's (tiny-cpu), old code path vs new in one run.

1. publish: one version into a WeightStore (flatten, sha256, chunk to disk, signed manifest, GC) plus the
   fsynced version record, per version: CPU ms and wall ms. `old` = before issue 19 (the manifest just written
   decoded and signature-checked again by GC, the record fsynced every version); `new` = the manifest kept
   decoded, the record reserved `RESERVE_VERSIONS` ahead.
2. learner loop: a sampler and a learner in this process (as `train-local`) whose learner publishes every step
   into a real WeightStore: steps/s with the publish in the training thread (old) against the background
   publisher (new), alternated `--rounds` times (ABAB...) so load drift hits both alike.
3. fetch: one version fetched by a second p2pd from this process's WeightServer (as a sampler does at every
   learner step): CPU ms of this process and of both p2pd daemons per version, against the publish's.
4. per group: signing + encoding (sampler), decoding + verifying (learner), CPU ms.
5. for scale: the single process's step split into sampling its groups and the learner step, CPU ms.

    python bench/swarm-speedup/swarm_costs.py [--seconds 20] [--rounds 2] [--versions 40] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib

from swarmnode.config import load_config  # noqa: E402
from swarmnode.identity import Identity  # noqa: E402
from swarmnode.learner import versions as versions_module  # noqa: E402
from swarmnode.learner.buffer import ReplayBuffer, RolloutInbox  # noqa: E402
from swarmnode.learner.checkpoint import write_published  # noqa: E402
from swarmnode.learner.loop import LearnerLoop  # noqa: E402
from swarmnode.model.models import load_model, load_tokenizer  # noqa: E402
from swarmnode.protocol.rollout import RolloutGroup, RolloutLimits  # noqa: E402
from swarmnode.sampler.build import build_engine  # noqa: E402
from swarmnode.sampler.loop import SamplerLoop  # noqa: E402
from swarmnode.swarm.weights import WeightFetcher, WeightServer, WeightStore  # noqa: E402
from swarmnode.tasks import build_task  # noqa: E402

RUN = "costs"


class OldStore(WeightStore):
    """The store as it was: a manifest it wrote is decoded (and its signature verified) again when next read."""

    def _write_manifest(self, path: Path, manifest) -> None:
        self._atomic_write(path, manifest.encode())


def cpu_ms(fn, n: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per call of `fn(i)` over `n` calls."""
    c, w = time.process_time(), time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.process_time() - c) / n * 1e3, (time.perf_counter() - w) / n * 1e3


def publish_costs(cfg, tmp: Path, versions: int) -> dict:
    model = load_model(cfg.model, cfg.task, torch.device("cpu"))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ident = Identity.generate()
    out = {}
    for mode, store_cls, reserve in (("old", OldStore, 0), ("new", WeightStore, versions_module.RESERVE_VERSIONS)):
        store = store_cls(tmp / f"publish-{mode}", RUN)
        record = tmp / f"published-{mode}"

        def one(v: int) -> None:
            state["model.norm.weight"].add_(1e-3)  # every version differs, as after a step
            if v % (reserve + 1) == 0:
                write_published(record, v + reserve)
            store.publish(v, state, ident, parent_version=v - 1, model_id=cfg.model.name)

        cpu, wall = cpu_ms(one, versions)
        out[mode] = {"cpu_ms": round(cpu, 2), "wall_ms": round(wall, 2)}
    out["cpu_ratio_new_over_old"] = round(out["new"]["cpu_ms"] / out["old"]["cpu_ms"], 3)
    out["wall_ratio_new_over_old"] = round(out["new"]["wall_ms"] / out["old"]["wall_ms"], 3)
    return out


def loop_steps(cfg, tmp: Path, background: bool, seconds: float, tag: str) -> dict:
    """Steps a sampler+learner loop makes in `seconds` when each version is published into a real store."""
    torch.manual_seed(0)
    task, tokenizer = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task)
    model = load_model(cfg.model, cfg.task, torch.device("cpu"))
    buffer = ReplayBuffer.from_config(cfg)
    store = (WeightStore if background else OldStore)(tmp / f"loop-{tag}", RUN)
    ident = Identity.generate()

    def publish(version: int, state) -> None:
        store.publish(version, state, ident, parent_version=version - 1, model_id=cfg.model.name)

    learner = LearnerLoop(
        model, tokenizer, task, cfg, buffer, publish, published_path=tmp / f"pv-{tag}", publish_in_background=background
    )
    inbox = RolloutInbox(buffer)
    sampler = SamplerLoop(build_engine(cfg), task, cfg.sampler, cfg.run_id, ident, inbox.send, seed=cfg.task.seed)
    learner.publish_current()
    start = time.perf_counter()
    cpu0 = time.process_time()
    while time.perf_counter() - start < seconds:
        sampler.offer_weights(learner.state_snapshot(), learner.version)
        sampler.step()
        while learner.step() is not None:
            pass
    learner.flush_publish(30)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    skipped = learner.publisher.skipped if learner.publisher else 0
    if learner.publisher:
        learner.publisher.close()
    return {
        "steps": learner.step_count,
        "steps_per_s": round(learner.step_count / wall, 2),
        "cpu_ms_per_step": round(cpu / max(1, learner.step_count) * 1e3, 2),
        "versions_skipped": skipped,
    }


async def fetch_costs(cfg, tmp: Path, versions: int) -> dict:
    """CPU per version fetched over real p2pd daemons (this process serves and fetches)."""
    from hivemind.p2p import P2P

    model = load_model(cfg.model, cfg.task, torch.device("cpu"))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ident = Identity.generate()
    kw = dict(host_maddrs=["/ip4/127.0.0.1/tcp/0"], nat_port_map=False, auto_nat=False)
    learner_p2p = await P2P.create(**kw)
    sampler_p2p = await P2P.create(initial_peers=await learner_p2p.get_visible_maddrs(), **kw)
    try:
        publisher = WeightStore(tmp / "fetch-learner", RUN)
        await WeightServer(publisher).start(learner_p2p)
        follower = WeightStore(tmp / "fetch-sampler", RUN)
        fetcher = WeightFetcher(sampler_p2p, follower, [ident.peer_id], layout=None)
        me = psutil.Process()
        daemons = [c for c in me.children(recursive=True) if "p2pd" in c.name()]

        def cpu() -> tuple[float, float]:
            own = me.cpu_times()
            return own.user + own.system, sum(sum(d.cpu_times()[:2]) for d in daemons)

        publish_cpu = fetch_cpu = 0.0
        p0, d0 = cpu()
        for v in range(versions):
            state["model.norm.weight"].add_(1e-3)
            c = time.process_time()
            publisher.publish(v, state, ident, parent_version=v - 1, model_id=cfg.model.name)
            publish_cpu += time.process_time() - c
            c = time.process_time()
            await fetcher.fetch([learner_p2p.peer_id], v)
            follower.state_dict(v)
            fetch_cpu += time.process_time() - c
        p1, d1 = cpu()
    finally:
        await sampler_p2p.shutdown()
        await learner_p2p.shutdown()
    n = versions
    return {
        "publish_cpu_ms": round(publish_cpu / n * 1e3, 2),
        "fetch_python_cpu_ms_both_sides": round(((p1 - p0) - publish_cpu) / n * 1e3, 2),
        "p2pd_cpu_ms_both_daemons": round((d1 - d0) / n * 1e3, 2),
        "version_bytes": sum(t.numel() * t.element_size() for t in state.values()),
    }


def local_split(cfg, rounds: int = 120) -> dict:
    """The single process's step, split: CPU ms per learner step spent sampling its groups and training."""
    from swarmnode.local.trainer import LocalTrainer

    trainer = LocalTrainer(cfg, progress=None)
    sampling = training = 0.0
    for _ in range(rounds):
        trainer._deliver()
        c = time.thread_time()
        trainer.sampler.step()
        sampling += time.thread_time() - c
        c = time.thread_time()
        while trainer.learner.step() is not None:
            pass
        training += time.thread_time() - c
    steps = max(1, trainer.learner.step_count)
    return {
        "steps": steps,
        "sampling_cpu_ms_per_step": round(sampling / steps * 1e3, 1),
        "learner_cpu_ms_per_step": round(training / steps * 1e3, 1),
    }


def group_costs(cfg, n: int = 300) -> dict:
    ident = Identity.generate()

    def make(i: int) -> RolloutGroup:
        return RolloutGroup.create(
            identity=ident,
            run_id=RUN,
            prompt_id="p1",
            prompt_tokens=list(range(12)),
            completions=[[1, 2, 3, 4, 5, 6, 7, 8]] * 8,
            logprobs=[[-1.0] * 8] * 8,
            temperature=1.0,
            rewards=[0.5] * 8,
            policy_version=1,
            lineage="",
        )

    body = make(0).encode()
    limits = RolloutLimits.from_config(cfg, vocab_size=64)
    sign, _ = cpu_ms(lambda i: make(i).encode(), n)
    verify, _ = cpu_ms(lambda i: RolloutGroup.decode(body, limits), n)
    return {"sign_encode_cpu_ms": round(sign, 3), "decode_verify_cpu_ms": round(verify, 3), "bytes": len(body)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="per learner-loop run")
    ap.add_argument("--rounds", type=int, default=2, help="old/new learner-loop pairs")
    ap.add_argument("--versions", type=int, default=40)
    ap.add_argument("--set", dest="sets", action="append", default=[])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)  # as a node pinned to one core has
    cfg = load_config("tiny-cpu", args.sets)
    doc: dict = {
        "command": "python bench/swarm-speedup/swarm_costs.py " + " ".join(sys.argv[1:]),
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    with tempfile.TemporaryDirectory(prefix="swarm-costs-") as tmp:
        doc["publish_per_version"] = publish_costs(cfg, Path(tmp), args.versions)
        print(json.dumps(doc["publish_per_version"]), file=sys.stderr)
        runs = {"old": [], "new": []}
        for r in range(args.rounds):
            for mode in ("old", "new"):
                runs[mode].append(loop_steps(cfg, Path(tmp), mode == "new", args.seconds, f"{mode}{r}"))
                print(mode, runs[mode][-1], file=sys.stderr)
        doc["learner_loop"] = runs
        old = statistics.fmean(r["steps_per_s"] for r in runs["old"])
        new = statistics.fmean(r["steps_per_s"] for r in runs["new"])
        doc["learner_loop_steps_ratio_new_over_old"] = round(new / old, 3) if old else None
        doc["fetch_per_version"] = asyncio.run(fetch_costs(cfg, Path(tmp), args.versions))
        doc["per_group"] = group_costs(cfg)
        doc["local_step_split"] = local_split(cfg)
    doc["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(doc, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
