"""The run card and the invite without a network: signing, refusals (another key, a tampered or older card),
the shared/local split, a joiner's conflicting setting named with both values, and which updates a node follows."""

from __future__ import annotations

import pytest
from card_helpers import BOOT, card_of

from swarmnode.config import ConfigError, load_config, load_config_data
from swarmnode.config.shared import diff, followable, is_shared, shared_settings
from swarmnode.errors import UsageError
from swarmnode.identity import Identity
from swarmnode.node.host import HostFiles, next_card, write_card
from swarmnode.node.invite import CardWatch, config_from_card
from swarmnode.protocol.codec import InvalidRecord
from swarmnode.protocol.run_card import Invite, RunCard, newest_card


def test_a_card_round_trips_signed_and_a_tampered_one_is_refused():
    owner = Identity.generate()
    card = card_of(owner)
    back = RunCard.decode(card.encode())
    assert back == card and RunCard.from_file(card.to_file()) == card
    card.settings["sampler"]["temperature"] = 0.7  # changed after signing
    with pytest.raises(InvalidRecord, match="signature"):
        RunCard.decode(card.encode())


def test_only_the_invites_owner_and_a_newer_version_are_taken():
    owner, stranger = Identity.generate(), Identity.generate()
    mine, theirs = card_of(owner, 2), card_of(stranger, 9)
    assert newest_card([mine, theirs], owner.peer_id, "tiny-demo") is mine
    assert newest_card([theirs], owner.peer_id, "tiny-demo") is None  # another key's card: never
    assert newest_card([mine], owner.peer_id, "tiny-demo", above=2) is None  # not newer than the one held
    assert newest_card([mine], owner.peer_id, "other-run") is None
    forged = card_of(stranger, 3)
    forged.owner = owner.peer_id  # claims the owner, signed by another key
    with pytest.raises(InvalidRecord):
        RunCard.decode(forged.encode())


def test_an_invite_round_trips_and_a_damaged_one_is_one_line():
    invite = Invite("tiny-demo", Identity.generate().peer_id, (BOOT,))
    assert Invite.parse(invite.encode()) == invite
    for bad in ("hello", invite.encode()[:-20], "swarmnode1:!!!"):
        with pytest.raises(UsageError) as err:
            Invite.parse(bad)
        assert "\n" not in str(err.value)


def test_shared_and_local_keys():
    for key in (
        "model.name",
        "task.max_operand",
        "sampler.temperature",
        "sampler.num_generations",
        "learner.learning_rate",
        "sync.max_staleness",
        "trust.learner_keys",
        "learner.lora.r",
    ):
        assert is_shared(key), key
    for key in (
        "role",
        "sampler.engine",
        "sampler.device",
        "sampler.prompts_per_batch",
        "learner.device",
        "learner.buffer_size",
        "network.host_maddrs",
        "metrics.port",
        "data_dir",
        "task.path",
        "trust.accept_any_learner",
        "learner.gradient_accumulation_steps",
    ):
        assert not is_shared(key), key


def test_a_joiner_takes_the_runs_settings_and_may_set_only_local_keys():
    card = card_of(Identity.generate(), sync__max_staleness=5)
    cfg = config_from_card(card, load_config_data(None, ["sampler.prompts_per_batch=2", "metrics.port=0"]))
    assert cfg.run_id == "tiny-demo" and cfg.sync.max_staleness == 5 and cfg.model.name == "builtin:tiny"
    assert cfg.network.initial_peers == [BOOT] and cfg.network.host_maddrs == ["/ip4/127.0.0.1/tcp/0"]  # host's
    assert cfg.sampler.prompts_per_batch == 2 and cfg.metrics.port == 0
    assert config_from_card(card_of(Identity.generate()), load_config_data("tiny-cpu", [])).run_id  # the same
    with pytest.raises(UsageError) as err:
        config_from_card(card, load_config_data("tiny-cpu", ["sampler.temperature=0.7"]))
    assert "sampler.temperature 0.7, run 1.0" in str(err.value) and "sync.max_staleness 16, run 5" in str(err.value)


def test_followable_updates_and_the_ones_that_make_a_node_leave():
    base = shared_settings(load_config("tiny-cpu"))
    a, b = Identity.generate().peer_id, Identity.generate().peer_id
    keys = shared_settings(load_config("tiny-cpu", [f"trust.learner_keys=[{a},{b}]", "sync.max_staleness=4"]))
    model = shared_settings(load_config("tiny-cpu", ["model.tiny.seed=3"]))
    assert followable(diff(base, keys)) and [k for k, _, _ in diff(base, keys)] == [
        "sync.max_staleness",
        "trust.learner_keys",
    ]
    assert not followable(diff(base, model))


class _Member:
    def __init__(self):
        self.fields = {"software": "swarmnode/0.1.0"}

    def update(self, **fields):
        self.fields.update(fields)


def test_a_watch_applies_a_followable_update_and_leaves_on_a_model_change():
    owner = Identity.generate()
    v1 = card_of(owner)
    cfg = config_from_card(v1, {})
    seen, lines = [], []
    member = _Member()
    watch = CardWatch(cfg, v1, member, lines.append, on_change=seen.append)
    assert member.fields["software"] == f"swarmnode/0.1.0 card/1/{owner.peer_id[-8:]}"
    v2 = card_of(owner, 2, sync__max_staleness=3)
    assert (
        watch.take(v2)
        and cfg.sync.max_staleness == 3
        and seen
        and member.fields["software"].endswith(f"card/2/{owner.peer_id[-8:]}")
    )
    assert "sync.max_staleness 16 -> 3" in lines[-1]
    v3 = card_of(owner, 3, sync__max_staleness=3, model__tiny__seed=7)
    assert not watch.take(v3) and "model.tiny.seed" in watch.left and cfg.model.tiny.seed == 0


def test_the_card_file_and_the_invite_file(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMNODE_HOME", str(tmp_path))
    owner = Identity.generate()
    card = card_of(owner)
    files = HostFiles.of("tiny-demo")
    write_card(files, card)
    text = files.invite.read_text().split()
    assert text[:2] == ["swarmnode", "join"] and Invite.parse(text[2]) == Invite.of(card)
    same = next_card(load_config("tiny-cpu"), owner, [BOOT], card)
    assert same is card  # nothing changed: the same version
    moved = next_card(load_config("tiny-cpu"), owner, [BOOT, BOOT.replace("31337", "31338")], card)
    assert moved.version == 2 and moved.check()


def test_learner_keys_are_checked_when_the_config_is_read():
    with pytest.raises(ConfigError) as err:
        load_config("tiny-cpu", ["trust.learner_keys=[notapeerid]"])
    assert "trust.learner_keys: 'notapeerid' is not a peer id" in str(err.value)
    assert load_config(None, [f"trust.learner_keys=[{Identity.generate().peer_id}]"]).trust.learner_keys
