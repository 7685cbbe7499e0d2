"""Can a peer's honestly scored text steer a SAPO policy, and does the plausibility check stop it? (issue #40)

In-process SAPO swarm (no network, lockstep rounds as bench/sapo/sapo_sweep.py): a victim node and an honest peer
of the same model each train their own policy on I local + J external groups; in the attack arms a third peer
offers the victim `--attack-groups` marker groups per round (tests/sapo_marker_peer.py `marker_group`: completions
"<sum>zz" with partial credit above the group mean, "x" below, every reward true), of which the pool lets at most
`sapo.max_groups_per_peer` into a batch. Four arms, same seeds: no attack and attack, each with
`sapo.plausibility_check` off and on (with it, the per-peer distrust that follows repeated refusals). Reported per arm: the victim's marker rate (share of its own sampled
completions containing the marker) over the last `--tail` rounds, its own reward over the same rounds, the
attack's groups trained on and refused, and the honest peer's groups refused (the check's false positives).

    python bench/sapo-marker-attack/marker_attack.py [--rounds 300] [--seeds 0 1] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for benchlib
from benchlib import config_args, use_test_helpers  # noqa: E402

use_test_helpers()
from sapo_marker_peer import MARKER, marker_group  # noqa: E402

ARMS = [("no attack", False, False), ("no attack", False, True), ("attack", True, False), ("attack", True, True)]


def run_arm(attack: bool, defence: bool, seed: int, args) -> dict:
    """One swarm of victim + honest peer (+ attacker) for `args.rounds` rounds; the victim's figures."""
    import torch

    from swarmnode.config import load_config
    from swarmnode.identity import Identity
    from swarmnode.node.sapo.policy import SapoPolicy

    torch.manual_seed(seed)
    cfg = load_config(args.config, [*args.sets, f"sapo.plausibility_check={defence}"])
    victim = SapoPolicy(cfg, Identity.generate(), seed=seed * 100)
    honest = SapoPolicy(cfg, Identity.generate(), seed=seed * 100 + 1)
    attacker, rng = Identity.generate(), random.Random(f"attack:{seed}")
    marked, rewards, began = [], [], time.monotonic()
    for _ in range(args.rounds):
        mine, theirs = victim.generate(), honest.generate()
        texts = [c for g in mine for c in g.completions]
        marked.append(sum(MARKER in c for c in texts) / len(texts))
        rewards.append(victim.last_own_reward)
        for group in theirs:
            victim.receive(group)
        for group in mine:
            honest.receive(group)
        if attack:
            for prompt in victim.task.sample(args.attack_groups, rng):
                victim.receive(marker_group(attacker, cfg.run_id, prompt))
        victim.train_step()
        honest.train_step()
    tail = slice(-args.tail, None)
    refused = victim.plausibility.refused if victim.plausibility else {}
    return {
        "arm": f"{'attack' if attack else 'no attack'}, defence {'on' if defence else 'off'}",
        "seed": seed,
        "rounds": args.rounds,
        "seconds": round(time.monotonic() - began, 1),
        "marker_rate_tail": round(statistics.fmean(marked[tail]), 4),
        "marker_rate_max": round(max(marked), 4),
        "own_reward_first": round(statistics.fmean(rewards[: args.tail]), 4),
        "own_reward_tail": round(statistics.fmean(rewards[tail]), 4),
        "attack_trained": victim.external_by_peer.get(attacker.peer_id, 0),
        "attack_refused": refused.get(attacker.peer_id, 0),
        "honest_trained": victim.external_by_peer.get(honest.identity.peer_id, 0),
        "honest_refused": refused.get(honest.identity.peer_id, 0),
        "unchecked": victim.plausibility.unchecked if victim.plausibility else None,
        "attacker_distrusted": victim.distrust.episodes.get(attacker.peer_id, 0),
        "curve": [round(x, 4) for x in marked],
        "load": round(os.getloadavg()[0], 2),
    }


def table(cells: list[dict]) -> str:
    rows = [
        "| arm | marker rate, last rounds (max) | own reward first → last rounds | attack groups trained / "
        "refused (times distrusted) | honest peer's groups trained / refused |",
        "|---|---|---|---|---|",
    ]
    for arm in dict.fromkeys(c["arm"] for c in cells):
        mine = [c for c in cells if c["arm"] == arm]
        mean = lambda key: statistics.fmean(c[key] for c in mine)  # noqa: E731
        rows.append(
            f"| {arm} | {100 * mean('marker_rate_tail'):.1f} % ({100 * max(c['marker_rate_max'] for c in mine):.1f} %) "
            f"| {mean('own_reward_first'):.3f} → {mean('own_reward_tail'):.3f} "
            f"| {sum(c['attack_trained'] for c in mine)} / {sum(c['attack_refused'] for c in mine)} "
            f"({sum(c['attacker_distrusted'] for c in mine)}) "
            f"| {sum(c['honest_trained'] for c in mine)} / {sum(c['honest_refused'] for c in mine)} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    config_args(ap, "tiny-cpu")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--tail", type=int, default=50, help="rounds the end figures are taken over")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--attack-groups", type=int, default=4, help="marker groups offered to the victim per round")
    ap.add_argument("--out", default=str(Path(__file__).with_name("results")))
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells = []
    for seed in args.seeds:
        for _, attack, defence in ARMS:
            cell = run_arm(attack, defence, seed, args)
            cells.append(cell)
            print(json.dumps({k: v for k, v in cell.items() if k != "curve"}), flush=True)
    (out / "cells.json").write_text(json.dumps(cells, indent=1))
    text = table(cells)
    (out / "table.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
