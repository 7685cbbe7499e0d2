"""The run card's digests of the model weights' source and the task's data, without a network: the host fills them,
the same bytes elsewhere pass, and a joiner whose file differs is refused in one line naming what differs."""

from __future__ import annotations

import json
import shutil

import pytest

from swarmnode.config import load_config, load_config_data
from swarmnode.identity import Identity
from swarmnode.model.sources import data_source, directory_digest, model_source, source_digests
from swarmnode.node.host import next_card
from swarmnode.node.invite import SourceMismatch, check_sources, config_from_card

BOOT = "/ip4/127.0.0.1/tcp/31337/p2p/12D3KooWFqCkwozuivmdDoCZAqW8aPcPrjHLXMD8wpfSWAeVKgjD"


def problems(path, answers: list[int]):
    path.write_text("".join(json.dumps({"problem": f"{a} + 1 = ?", "answer": str(a + 1)}) + "\n" for a in answers))
    return path


def test_the_host_fills_the_model_and_data_digests_and_each_follows_its_source():
    owner = Identity.generate()
    card = next_card(load_config("tiny-cpu"), owner, [BOOT], None)
    assert set(card.sources) == {"model", "data"} and all(len(v) == 64 for v in card.sources.values())
    assert card.check() and next_card(load_config("tiny-cpu"), owner, [BOOT], card) is card  # nothing changed
    seeded_cfg = load_config("tiny-cpu", ["model.tiny.seed=3"])
    seeded = source_digests(seeded_cfg.model, seeded_cfg.task)
    assert seeded["model"] != card.sources["model"] and seeded["data"] == card.sources["data"]
    other_cfg = load_config("tiny-cpu", ["task.max_operand=50"])
    other_task = source_digests(other_cfg.model, other_cfg.task)
    assert other_task["data"] != card.sources["data"]
    hub = load_config(None, ["model.name=some-org/some-model"]).model
    assert model_source(hub) != model_source(hub.model_copy(update={"revision": "abc123"}))


def test_a_joiner_with_other_task_data_is_refused_naming_it_and_a_copy_elsewhere_passes(tmp_path):
    ours, copy, theirs = (
        problems(tmp_path / "ours.jsonl", [1, 2, 3]),
        tmp_path / "copy.jsonl",
        problems(tmp_path / "theirs.jsonl", [1, 2, 4]),
    )
    shutil.copy(ours, copy)
    math = ["task.name=math", "model.tiny.warm_start_steps=0"]
    card = next_card(load_config("tiny-cpu", [*math, f"task.path={ours}"]), Identity.generate(), [BOOT], None)
    assert card.sources["data"] == data_source(load_config("tiny-cpu", [*math, f"task.path={ours}"]).task)

    check_sources(config_from_card(card, load_config_data(None, [f"task.path={copy}"])), card)  # same bytes
    with pytest.raises(SourceMismatch) as err:
        check_sources(config_from_card(card, load_config_data(None, [f"task.path={theirs}"])), card)
    message = str(err.value)
    assert "\n" not in message and "task data sha256" in message and str(theirs) in message, message
    assert card.sources["data"][:12] in message and "model" not in message.split(":")[1], message


def test_a_model_directory_digest_covers_every_file(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\0" * 64)
    before = directory_digest(model)
    (model / ".cache").mkdir()
    (model / ".cache" / "lock").write_text("x")  # hidden: not the model
    assert directory_digest(model) == before
    (model / "model.safetensors").write_bytes(b"\1" + b"\0" * 63)
    assert directory_digest(model) != before
    cfg = load_config(None, [f"model.name={model}"])
    card = next_card(cfg, Identity.generate(), [BOOT], None)
    (model / "tokenizer.json").write_text("{}")
    with pytest.raises(SourceMismatch, match="model weights' source sha256"):
        check_sources(cfg, card)
