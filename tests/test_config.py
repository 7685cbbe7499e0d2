"""Config: presets load, `--set` overrides apply, and user mistakes give one clear line + exit code 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from swarmnode.config import ConfigError, NodeConfig, apply_override, load_config, preset_names

REPO = Path(__file__).resolve().parent.parent
PRESETS = ["tiny-cpu", "qwen3-0.6b-math", "qwen3-1.7b-math-gepo"]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real console script (or `python -m swarmnode` where the script is not on PATH)."""
    exe = shutil.which("swarmnode")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "swarmnode", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=os.environ.copy())


def test_presets_are_shipped_and_load():
    assert set(PRESETS) <= set(preset_names())
    for name in PRESETS:
        cfg = load_config(name)
        assert isinstance(cfg, NodeConfig)
        assert cfg.run_id  # every preset names its run


def test_tiny_cpu_is_loopback_only_and_self_contained():
    cfg = load_config("tiny-cpu")
    assert cfg.network.host_maddrs == ["/ip4/127.0.0.1/tcp/0"]
    assert cfg.network.nat_port_map is False and cfg.network.auto_nat is False
    assert cfg.model.name == "builtin:tiny"
    assert cfg.task.name == "arithmetic"
    assert cfg.sampler.temperature == 1.0


def test_gepo_preset_is_the_papers_setup():
    cfg = load_config("qwen3-1.7b-math-gepo")
    assert cfg.model.name == "Qwen/Qwen3-1.7B"
    assert cfg.learner.algorithm == "gepo" and cfg.learner.scale_rewards == "none"
    assert cfg.sampler.num_generations == 8
    assert cfg.learner.prompts_per_step == 32 and cfg.sampler.prompts_per_batch == 32
    assert cfg.learner.learning_rate == pytest.approx(1e-6)
    assert cfg.sampler.temperature == pytest.approx(0.6)
    assert cfg.sampler.max_completion_length == 4096
    assert cfg.learner.cppo_beta == pytest.approx(0.005) and cfg.learner.beta == 0


def test_preset_by_path_equals_preset_by_name():
    assert load_config(str(REPO / "configs" / "tiny-cpu.yaml")) == load_config("tiny-cpu")


def test_overrides_apply_with_yaml_types():
    cfg = load_config(
        "tiny-cpu",
        [
            "learner.loss_type=grpo",
            "sampler.temperature=0.7",
            "network.nat_port_map=true",
            "network.initial_peers=[/ip4/1.2.3.4/tcp/1/p2p/QmX]",
            "metrics.port=null",
            "run_id=other",
        ],
    )
    assert cfg.learner.loss_type == "grpo"
    assert cfg.sampler.temperature == pytest.approx(0.7)
    assert cfg.network.nat_port_map is True
    assert cfg.network.initial_peers == ["/ip4/1.2.3.4/tcp/1/p2p/QmX"]
    assert cfg.metrics.port is None
    assert cfg.run_id == "other"


def test_later_override_wins_and_defaults_fill_the_rest():
    cfg = load_config(None, ["sampler.num_generations=4", "sampler.num_generations=16"])
    assert cfg.sampler.num_generations == 16
    assert cfg.learner == NodeConfig().learner


def test_override_into_a_value_is_refused():
    data = {"run_id": "x"}
    with pytest.raises(ConfigError, match="run_id"):
        apply_override(data, "run_id.deeper=1")
    with pytest.raises(ConfigError, match="key=value"):
        apply_override(data, "no-equals-sign")


@pytest.mark.parametrize(
    ("override", "must_contain"),
    [
        ("learner.nonsense=1", ["learner.nonsense", "unknown key", "loss_type"]),
        ("nosection.x=1", ["nosection", "unknown key"]),
        ("learner.loss_type=ppo", ["learner.loss_type", "'grpo'", "'bnpo'", "'dapo'"]),
        ("sampler.num_generations=many", ["sampler.num_generations", "integer"]),
        ("sampler.temperature=-1", ["sampler.temperature", "greater than 0"]),
        ("network.startup_timeout=0", ["network.startup_timeout"]),
        ("sync.simulate_delay=gauss:1", ["sync.simulate_delay", "fixed:S"]),
        ("run_id=has space", ["run_id"]),
    ],
)
def test_bad_config_in_process_names_the_key(override, must_contain):
    with pytest.raises(ConfigError) as info:
        load_config("tiny-cpu", [override])
    message = str(info.value)
    assert "\n" not in message
    for part in must_contain:
        assert part in message


@pytest.mark.parametrize(
    ("args", "must_contain"),
    [
        (["--set", "learner.nonsense=1"], "learner.nonsense: unknown key"),
        (["--set", "sampler.num_generations=many"], "sampler.num_generations"),
        (["--set", "sampler.num_generations=1"], "sampler.num_generations"),  # below the range (>= 2)
        (["--set", "learner.loss_type=ppo"], "learner.loss_type"),
        (["--config", "no-such-preset"], "no such file or preset"),
    ],
)
@pytest.mark.usefixtures("starts_processes")
def test_bad_config_through_the_cli_is_one_line_exit_2(args, must_contain):
    result = run_cli("hardware", "--config", "tiny-cpu", *args) if args[0] == "--set" else run_cli("hardware", *args)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and must_contain in lines[0]
    assert "Traceback" not in result.stderr + result.stdout


def test_unreadable_yaml_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("network: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot read YAML"):
        load_config(str(bad))
    bad.write_text("- a list\n- not a mapping\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(str(bad))


@pytest.mark.usefixtures("starts_processes")
def test_help_lists_the_commands():
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("join", "bootstrap", "dashboard", "demo", "hardware", "status"):
        assert command in result.stdout
