"""Mixed precision (fp32 master weights + bf16 autocast) learns like fp32; pure bf16 at a small lr is refused;
the learning-rate warmup/schedule runs per optimiser step and resumes from the checkpoint."""

from __future__ import annotations

import pytest
import torch
from learner_helpers import FAST, sampled_groups

from swarmnode.config import ConfigError, load_config
from swarmnode.learner.buffer import ReplayBuffer
from swarmnode.learner.loop import LearnerLoop
from swarmnode.model.models import load_model, load_tokenizer
from swarmnode.sampler.build import build_engine
from swarmnode.tasks import build_task


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny-cpu", FAST)


@pytest.fixture(scope="module")
def parts(cfg):
    return build_task(cfg.task), load_tokenizer(cfg.model, cfg.task), build_engine(cfg)


def _loop(cfg, parts, dtype="float32", checkpoint_dir=None, **learner):
    c = cfg.model_copy(
        update={
            "learner": cfg.learner.model_copy(update=learner),
            "model": cfg.model.model_copy(update={"dtype": dtype}),
        }
    )
    task, tokenizer, _ = parts
    return LearnerLoop(
        load_model(c.model, c.task, "cpu"),
        tokenizer,
        task,
        c,
        ReplayBuffer.from_config(c),
        checkpoint_dir=checkpoint_dir,
    )


def _signal_rows(loop, groups):
    return [r for g in groups if (r := loop.rows.rows(g, loop.version)) and len({x.reward for x in r}) > 1]


def _update(loop, batches) -> torch.Tensor:
    before = [p.detach().float().clone() for p in loop.model.parameters()]
    for rows in batches:
        loop._optimise(rows)
    return torch.cat([(p.detach().float() - b).flatten() for p, b in zip(loop.model.parameters(), before)])


def test_bf16_autocast_moves_weights_like_fp32(cfg, parts):
    """A bf16 model: fp32 master weights + bf16 autocast vs all-fp32 (same bf16-rounded start), lr 1e-6."""
    groups = sampled_groups(cfg, parts, 3)
    ref_loop = _loop(cfg, parts, "bfloat16", precision="fp32", learning_rate=1e-6)
    rows = _signal_rows(ref_loop, groups)
    assert len(rows) >= 3
    batches = [rows[i : i + 2] for i in range(0, len(rows) - 1)]
    reference = _update(ref_loop, batches)
    mixed_loop = _loop(cfg, parts, "bfloat16", precision="autocast", learning_rate=1e-6)
    assert mixed_loop.precision.autocast_dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in mixed_loop.model.parameters())  # master weights
    assert all(v.dtype == torch.bfloat16 for v in mixed_loop.state_snapshot().values() if v.is_floating_point())
    mixed = _update(mixed_loop, batches)
    assert float((mixed - reference).norm() / reference.norm()) < 0.05
    # what the config refuses: bf16 parameters and AdamW at lr 1e-6 (bypassing validation) barely move
    pure = _update(_loop(cfg, parts, "bfloat16", precision="pure", learning_rate=1e-6), batches)
    assert float((pure - reference).norm() / reference.norm()) > 0.5


def test_pure_half_precision_at_a_small_lr_is_refused():
    with pytest.raises(ConfigError, match="learner.precision=auto"):
        load_config("tiny-cpu", ["model.dtype=bfloat16", "learner.precision=pure", "learner.learning_rate=1e-6"])
    assert (
        load_config(
            "tiny-cpu", ["model.dtype=bfloat16", "learner.precision=pure", "learner.learning_rate=1e-3"]
        ).learner.precision
        == "pure"
    )


def test_warmup_schedule_resumes_from_the_checkpoint(cfg, parts, tmp_path):
    groups = sampled_groups(cfg, parts, 3)
    settings = dict(lr_schedule="constant_with_warmup", warmup_steps=4, learning_rate=1e-3, checkpoint_every=1)
    loop = _loop(cfg, parts, checkpoint_dir=tmp_path, **settings)
    rows = _signal_rows(loop, groups)
    seen = []
    for i in range(3):
        seen.append(loop._optimise(rows[i : i + 2])["learning_rate"])
        loop.step_count += 1
    loop.save()
    assert seen == pytest.approx([0.0, 2.5e-4, 5e-4])
    resumed = _loop(cfg, parts, checkpoint_dir=tmp_path, **settings)
    assert resumed.resumed and resumed.step_count == 3
    assert [resumed._optimise(rows[i : i + 2])["learning_rate"] for i in range(2)] == pytest.approx([7.5e-4, 1e-3])
    cosine = _loop(cfg, parts, lr_schedule="cosine", warmup_steps=0, total_steps=2, learning_rate=1e-3)
    assert [cosine._optimise(rows[i : i + 2])["learning_rate"] for i in range(3)] == pytest.approx([1e-3, 5e-4, 0])
