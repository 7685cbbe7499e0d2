"""The learner's TRL-style names, and the old names still accepted with a one-time deprecation warning."""

from __future__ import annotations

import logging

import pytest

from swarmnode.config import ConfigError, LearnerConfig, load_config
from swarmnode.config import compat as config_compat


@pytest.fixture(autouse=True)
def _fresh_warnings():
    config_compat._warned.clear()
    yield
    config_compat._warned.clear()


def test_defaults_are_gepo_unscaled_trl_clip():
    lc = LearnerConfig()
    assert (lc.algorithm, lc.loss_type, lc.scale_rewards, lc.epsilon, lc.epsilon_high, lc.beta) == (
        "gepo",
        "grpo",
        "none",
        0.2,
        None,
        0.0,
    )
    assert LearnerConfig(importance_sampling_level="sequence").algorithm == "gspo"
    assert LearnerConfig(importance_sampling_level="token", loss_type="dapo").algorithm == "grpo"


@pytest.mark.parametrize(
    "old,new",
    [
        ({"loss_type": "gepo"}, {"importance_sampling_level": "group"}),
        ({"loss_type": "gspo"}, {"importance_sampling_level": "sequence"}),
        ({"loss_type": "grpo"}, {"importance_sampling_level": "token", "loss_type": "grpo"}),
        ({"kl_coef": 0.005}, {"cppo_beta": 0.005, "beta": 0.0}),
        (
            {"token_aggregation": "bnpo", "loss_type": "grpo"},
            {"loss_type": "bnpo", "importance_sampling_level": "token"},
        ),
        ({"token_aggregation": "sequence"}, {"loss_type": "grpo"}),
        (
            {"defensive_lambda": 0.5, "defensive_schedule": "staleness", "group_scope": "microbatch"},
            {"gepo_defensive_lambda": 0.5, "gepo_defensive_schedule": "staleness", "gepo_group_scope": "microbatch"},
        ),
        ({"scale_rewards": "auto"}, {"scale_rewards": "none"}),
        ({"epsilon": None}, {"epsilon": 0.2}),
    ],
)
def test_old_names_map_to_new_ones_with_a_warning(old, new, caplog):
    with caplog.at_level(logging.WARNING, logger="swarmnode.config"):
        lc = LearnerConfig(**old)
    for key, value in new.items():
        assert getattr(lc, key) == value
    if old != {"epsilon": None}:
        assert "deprecated" in caplog.text


def test_each_old_name_warns_once(caplog):
    with caplog.at_level(logging.WARNING, logger="swarmnode.config"):
        for _ in range(3):
            load_config("tiny-cpu", ["learner.kl_coef=0.01", "learner.loss_type=gspo"])
    assert caplog.text.count("learner.kl_coef is deprecated") == 1
    assert caplog.text.count("learner.loss_type is deprecated") == 1


def test_new_names_do_not_warn_and_trl_grpo_with_a_level_is_aggregation(caplog):
    with caplog.at_level(logging.WARNING, logger="swarmnode.config"):
        cfg = load_config(
            "tiny-cpu",
            [
                "learner.loss_type=grpo",
                "learner.importance_sampling_level=sequence",
                "learner.cppo_beta=0.01",
                "learner.scale_rewards=batch",
            ],
        )
    assert cfg.learner.algorithm == "gspo" and cfg.learner.loss_type == "grpo"
    assert "deprecated" not in caplog.text


def test_bad_values_are_one_line_errors():
    with pytest.raises(ConfigError, match="importance_sampling_level"):
        load_config("tiny-cpu", ["learner.importance_sampling_level=tokens"])
    with pytest.raises(ConfigError, match="loss_type"):
        load_config("tiny-cpu", ["learner.loss_type=ppo"])


def test_beta_is_trls_reference_kl_and_warns_once_what_changed(caplog):
    assert LearnerConfig(beta=0).beta == 0  # an old config's default loads, silently
    with caplog.at_level(logging.WARNING, logger="swarmnode.config"):
        for _ in range(2):
            cfg = load_config("tiny-cpu", ["learner.beta=0.04"])
    assert cfg.learner.beta == pytest.approx(0.04) and cfg.learner.cppo_beta == 0
    assert caplog.text.count("learner.beta is TRL's KL to a frozen reference model") == 1
    assert "learner.cppo_beta" in caplog.text


@pytest.mark.parametrize(
    "value,meaning", [(True, "group"), (False, "none"), ("true", "group"), ("false", "none"), ("batch", "batch")]
)
def test_scale_rewards_takes_trls_booleans(value, meaning):
    if isinstance(value, str):
        assert load_config("tiny-cpu", [f"learner.scale_rewards={value}"]).learner.scale_rewards == meaning
    else:
        assert LearnerConfig(scale_rewards=value).scale_rewards == meaning


@pytest.mark.parametrize("level", ["sequence", "group"])
def test_length_weighting_of_sequence_weights_warns_once(level, caplog):
    with caplog.at_level(logging.WARNING, logger="swarmnode.config"):
        for _ in range(2):
            LearnerConfig(importance_sampling_level=level, loss_type="dapo")
        LearnerConfig(importance_sampling_level="token", loss_type="dapo")
        LearnerConfig(importance_sampling_level=level, loss_type="grpo")
    assert caplog.text.count("weights each sequence-level importance weight") == 1


def test_an_unset_learning_rate_suits_the_model_and_a_far_one_is_warned(caplog):
    from swarmnode.config import NodeConfig
    from swarmnode.config.advice import DEFAULT_LEARNING_RATE

    qwen = {"name": "Qwen/Qwen3-0.6B"}
    assert LearnerConfig().learning_rate == 1e-6  # TRL's default
    assert NodeConfig(model=qwen).learner.learning_rate == DEFAULT_LEARNING_RATE["full"] == 1e-6
    assert NodeConfig(model=qwen, learner={"lora": {"enabled": True}}).learner.learning_rate == 1e-5
    assert NodeConfig().learner.learning_rate == 1e-3  # the built-in tiny model
    with caplog.at_level(logging.WARNING, logger="swarmnode.config"):
        NodeConfig(model=qwen, learner={"lora": {"enabled": True}})
        NodeConfig(model=qwen, learner={"learning_rate": 5e-6})
        NodeConfig(learner={"learning_rate": 0.05})  # the tiny model: no range applies
        assert caplog.text == ""
        NodeConfig(model=qwen, learner={"learning_rate": 1e-3})
        assert "far above the usual 1e-7..1e-5" in caplog.text
        NodeConfig(model=qwen, learner={"learning_rate": 1e-2, "lora": {"enabled": True}})
        assert "under LoRA: above the usual" in caplog.text
    for name in ("qwen3-0.6b-math", "qwen3-1.7b-math-gepo"):
        assert load_config(name).learner.learning_rate == 1e-6
