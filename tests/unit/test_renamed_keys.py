"""The table of renamed config keys: every new name is a real key and no old name is; an
old key a user writes names its new one; a saved config moves to the new names."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from rayrl.algorithms import ALGORITHMS
from rayrl.config import Config
from rayrl.errors import ConfigError
from rayrl.presets import config_from_dict, load_config, migrate_saved, saved_config
from rayrl.renamed_keys import RENAMED_KEYS


def config_keys(cls: type, prefix: str = "") -> set[str]:
    """Every dotted key of a config dataclass (its sections' keys too)."""
    keys = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        dotted = f"{prefix}{f.name}"
        keys.add(dotted)
        if isinstance(hints[f.name], type) and dataclasses.is_dataclass(hints[f.name]):
            keys |= config_keys(hints[f.name], dotted + ".")
    return keys


def all_keys() -> set[str]:
    keys = config_keys(Config) - {"algorithm"}
    for algorithm in ALGORITHMS.values():
        keys |= config_keys(algorithm.config_class, "algorithm.")
    return keys


def test_every_new_name_is_a_config_key_and_no_old_name_is():
    keys = all_keys()
    assert "algorithm.replay.capacity" in keys  # the walk reaches nested sections
    for entry in RENAMED_KEYS:
        assert entry.old not in keys, entry
        for new in entry.new:
            assert new in keys, entry


@pytest.mark.parametrize("entry", RENAMED_KEYS, ids=lambda entry: entry.old)
def test_an_old_key_that_a_user_writes_names_its_new_one(entry):
    with pytest.raises(ConfigError) as error:
        load_config("cartpole_ppo", [f"{entry.old}=1"])
    message = str(error.value)
    assert f"unknown key '{entry.old}'" in message
    assert all(f"'{new}'" in message for new in entry.new)


def test_a_saved_config_splits_the_old_hang_timeout_into_both_new_ones():
    saved = {"faults": {"call_timeout_s": 42.0, "max_storage_errors": 7}}
    faults = saved_config(saved).faults
    assert (faults.probe_timeout_s, faults.stall_timeout_s, faults.max_write_errors) == (42, 42, 7)
    assert saved == {"faults": {"call_timeout_s": 42.0, "max_storage_errors": 7}}  # untouched


def test_a_saved_on_policy_config_keeps_its_unroll_length_and_drops_what_it_never_read():
    saved = {
        "algorithm": {"name": "ppo", "num_steps": 24, "num_storages": 600},
        "workers": {"steps_per_chunk": 99},  # earlier, every config had one; PPO ignored it
        "replay": {"capacity": 5},
    }
    algorithm = saved_config(saved).algorithm
    assert (algorithm.steps_per_chunk, algorithm.queue_capacity) == (24, 600)


def test_a_saved_off_policy_config_moves_its_chunk_length_and_replay():
    saved = {"workers": {"steps_per_chunk": 7}, "replay": {"capacity": 5000}}
    algorithm = saved_config(saved).algorithm  # no name: the default algorithm, DQN
    assert (algorithm.steps_per_chunk, algorithm.replay.capacity) == (7, 5000)


def test_a_new_key_already_set_wins_over_its_old_name():
    saved = {"faults": {"call_timeout_s": 5.0, "stall_timeout_s": 9.0}}
    data = migrate_saved(saved)
    assert data["faults"] == {"probe_timeout_s": 5.0, "stall_timeout_s": 9.0}
    assert config_from_dict(data).faults.stall_timeout_s == 9.0
