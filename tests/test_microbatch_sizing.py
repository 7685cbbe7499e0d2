"""The largest forward/backward pass the learner loop runs is the one the memory estimate, `swarmnode hardware` and
`hardware --measure` size: for every shipped preset, and on a real loop."""

from __future__ import annotations

import pytest
import torch
from learner_helpers import FAST, make_loop, sampled_groups

from swarmnode.config import load_config, preset_names
from swarmnode.learner.memory import micro_batch_rows_and_tokens
from swarmnode.learner.microbatch import plan_microbatches, rows_per_chunk
from swarmnode.model.models import load_tokenizer
from swarmnode.sampler.build import build_engine
from swarmnode.tasks import build_task


def _largest_pass(cfg) -> tuple[int, int]:
    """(rows, padded tokens) of the largest micro-batch the loop's own split makes of a full step of full-length
    rows (every group with signal, every prompt and completion at the configured maximum)."""
    s, lc = cfg.sampler, cfg.learner
    sizes = [(s.max_prompt_length, s.max_completion_length)] * (lc.prompts_per_step * s.num_generations)
    plan = plan_microbatches(
        sizes,
        rows_per_chunk(lc.prompts_per_step, s.num_generations, lc.gradient_accumulation_steps),
        lc.max_tokens_per_microbatch,
    )
    batches = [b for _, chunk in plan for b in chunk]
    assert sorted(i for b in batches for i in b) == list(range(len(sizes)))  # every row once
    widest = max(batches, key=len)
    return len(widest), len(widest) * (s.max_prompt_length + s.max_completion_length)


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_sizes_the_pass_the_loop_runs(name):
    cfg = load_config(name)
    assert _largest_pass(cfg) == micro_batch_rows_and_tokens(cfg.learner, cfg.sampler)


def test_lora_presets_run_micro_batches_of_four():
    for name in (n for n in preset_names() if n.endswith("-lora")):
        cfg = load_config(name)
        assert micro_batch_rows_and_tokens(cfg.learner, cfg.sampler)[0] == 4, name


def test_a_token_budget_is_sized_too():
    cfg = load_config("qwen3-1.7b-lora", ["learner.max_tokens_per_microbatch=10000"])
    assert _largest_pass(cfg) == micro_batch_rows_and_tokens(cfg.learner, cfg.sampler) == (2, 2 * (512 + 4096))


@pytest.mark.parametrize("name", [n for n in preset_names() if load_config(n).model.name == "builtin:tiny"])
def test_measure_runs_the_pass_the_loop_runs(name):
    from swarmnode.node.selfcheck.step import learner_step

    cfg = load_config(name, ["model.tiny.warm_start_steps=0", "learner.gradient_accumulation_steps=3"])
    step = learner_step(cfg, torch.device("cpu"))
    assert (step["rows"], step["tokens"]) == _largest_pass(cfg)


@pytest.mark.parametrize(
    "overrides",
    [dict(gradient_accumulation_steps=3), dict(gradient_accumulation_steps=2, max_tokens_per_microbatch=60)],
)
def test_the_loop_runs_the_planned_micro_batches(overrides):
    cfg = load_config("tiny-cpu", FAST + ["sampler.temperature=1.3"])
    parts = build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)
    loop = make_loop(cfg, parts, **overrides)
    groups = [rows for g in sampled_groups(cfg, parts, 2) if (rows := loop.rows.rows(g, loop.version))]
    seen: list[int] = []
    micro_loss = loop._micro_loss
    loop._micro_loss = lambda rows, *a: (seen.append(len(rows)), micro_loss(rows, *a))[1]
    loop.accumulate_gradients(groups)
    trained = [r for g in groups if len({x.reward for x in g}) > 1 for r in g]
    plan = plan_microbatches(
        [(len(r.prompt_tokens), len(r.completion)) for r in trained],
        rows_per_chunk(loop.lc.prompts_per_step, cfg.sampler.num_generations, loop.lc.gradient_accumulation_steps),
        loop.lc.max_tokens_per_microbatch,
    )
    assert seen == [len(b) for _, chunk in plan for b in chunk]
    assert max(seen) <= rows_per_chunk(
        loop.lc.prompts_per_step, cfg.sampler.num_generations, loop.lc.gradient_accumulation_steps
    )
