"""Strict config loading: presets, overrides, and errors that name key, value and what is valid."""

from __future__ import annotations

import pytest

from rayrl.algorithms import ALGORITHMS
from rayrl.algorithms.dqn import DQNConfig
from rayrl.config import (
    DEFAULT_ALGORITHM,
    AlgorithmConfig,
    config_to_dict,
    config_to_yaml,
    preset_names,
)
from rayrl.errors import ConfigError
from rayrl.presets import config_from_dict, load_config, saved_config
from tests.old_layout import older_layout


def test_presets_ship_with_the_package():
    assert {"cartpole_dqn", "pong_dqn"} <= set(preset_names())


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_and_round_trips_through_yaml(name, tmp_path):
    config = load_config(name)
    path = tmp_path / "resolved.yaml"
    path.write_text(config_to_yaml(config))
    assert load_config(path) == config


def test_default_is_cartpole_dqn():
    config = load_config()
    assert config.env.id == "CartPole-v1"
    assert isinstance(config.algorithm, DQNConfig)
    assert config.run.target_return == 475


def test_overrides_parse_yaml_values():
    config = load_config(
        None,
        [
            "learner.lr=1e-4",
            "algorithm.hidden_sizes=[32, 16]",
            "run.time_budget_s=30",
            "logging.wandb.tags=[a, b]",
            "run.target_return=null",
        ],
    )
    assert config.learner.lr == pytest.approx(1e-4)
    assert config.algorithm.hidden_sizes == (32, 16)
    assert config.run.time_budget_s == 30.0
    assert config.logging.wandb.tags == ("a", "b")
    assert config.run.target_return is None


def test_configs_are_frozen():
    config = load_config()
    with pytest.raises(AttributeError):
        config.learner.lr = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("learner.lrr=0.1", r"unknown key 'learner.lrr' \(did you mean 'lr'\?\)"),
        ("lerner.lr=0.1", r"unknown key 'lerner' \(did you mean 'learner'\?\)"),
        ("learner.lr=-1", r"learner.lr=-1.0 is out of range; valid: > 0.0"),
        ("learner.batch_size=0", r"learner.batch_size=0 is out of range; valid: >= 1"),
        ("learner.batch_size=abc", r"learner.batch_size='abc' is not valid; expected an integer"),
        ("learner.batch_size=1.5", r"learner.batch_size=1.5 is not valid; expected an integer"),
        (
            "algorithm.replay.prioritized=maybe",
            r"algorithm.replay.prioritized='maybe' .* expected true or false",
        ),
        ("run.runtime=gpu", r"run.runtime='gpu' .* expected one of 'ray', 'local'"),
        (
            "algorithm.name=dqnn",
            r"algorithm.name: unknown algorithm 'dqnn' \(did you mean 'dqn'\?\)",
        ),
        ("algorithm.gamma=1.5", r"algorithm.gamma=1.5 is out of range; valid: >= 0.0 and <= 1.0"),
        ("learner.lr=.inf", r"learner.lr=inf is not valid; expected a finite number"),
        ("learner.max_grad_norm=nan", r"learner.max_grad_norm='nan' .* expected a finite number"),
        ("run.time_budget_s=inf", r"run.time_budget_s='inf' .* expected a finite number"),
        ("env=3", r"env: expected a mapping of keys, got 3"),
        ("learner.lr", r"override 'learner.lr' must look like dotted.key=value"),
        ("learner.lr.x=1", r"'learner.lr' is a value, not a section"),
        (
            "algorithm.replay.min_size=10000000",
            r"algorithm.replay.min_size=10000000 is larger than algorithm.replay.capacity",
        ),
        (
            "replay.capacity=5",
            r"unknown key 'replay.capacity': it moved to 'algorithm.replay.capacity'",
        ),
        (
            "workers.steps_per_chunk=5",
            r"unknown key 'workers.steps_per_chunk': it moved to 'algorithm.steps_per_chunk'",
        ),
        (
            "faults.call_timeout_s=5",
            r"unknown key 'faults.call_timeout_s': it was split into 'faults.probe_timeout_s' "
            r"and 'faults.stall_timeout_s'",
        ),
        (
            "algorithm.hidden_sizes=[64, -1]",
            r"algorithm.hidden_sizes\[1\]=-1 is out of range; valid: >= 1",
        ),
        ("run.name=../x", r"run.name='../x' is not a plain directory name"),
        ("learner.device=tpu", r"learner.device='tpu' is not a torch device; valid: 'auto'"),
        ("learner.num_gpus=2.5", r"learner.num_gpus=2.5 is not an amount Ray schedules"),
        ("workers.cpus_per_worker=0", r"workers.cpus_per_worker=0.0 .* valid: >= 0.0001"),
    ],
)
def test_bad_values_name_the_key_the_value_and_what_is_valid(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


@pytest.mark.parametrize(
    "override",
    [
        "run.name=pong-dqn_seed.3",
        "run.name=minatar_ppo+decay-Breakout-s0",
        f"run.name={'x' * 255}",
        "run.name=null",
        "algorithm.hidden_sizes=[]",
        "algorithm.hidden_sizes=[1, 512]",
        "learner.device=cpu",
        "learner.device=cuda:1",
        "learner.device=mps",
        "learner.num_gpus=0",
        "learner.num_gpus=0.25",
        "learner.num_gpus=1",
        "learner.num_gpus=4",
        "workers.cpus_per_worker=0.5",
    ],
)
def test_the_values_the_checks_allow(override):
    """The checks that go beyond types and bounds refuse nothing that can run: a network
    without hidden layers is linear, and a CUDA index is the learner's own to fit (the
    pre-flight compares it with the GPUs Ray gives it)."""
    load_config(None, [override])


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ConfigError, match=r"unknown preset 'cartpole_dq'.*cartpole_dqn"):
        load_config("cartpole_dq")


def test_missing_config_file():
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("no/such/file.yaml")


def test_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("env: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_local_runtime_needs_a_replay_ratio():
    with pytest.raises(ConfigError, match="samples_per_insert"):
        load_config(None, ["run.runtime=local", "algorithm.replay.samples_per_insert=null"])


def test_batch_larger_than_warm_up_is_rejected():
    with pytest.raises(
        ConfigError, match=r"learner.batch_size=512 is larger than algorithm.replay.min_size"
    ):
        load_config(None, ["learner.batch_size=512", "algorithm.replay.min_size=256"])


@pytest.mark.parametrize("preset", ["cartpole_dqn", "cartpole_impala"])
def test_several_learners_need_the_ray_runtime(preset):
    with pytest.raises(ConfigError, match=r"learner.num_learners=2 needs the Ray runtime"):
        load_config(preset, ["learner.num_learners=2", "run.runtime=local"])


def test_config_from_dict_defaults_everything():
    config = config_from_dict({})
    assert config.algorithm == DQNConfig()
    assert config.env.id == "CartPole-v1"


def test_derived_sizes():
    config = load_config(None, ["workers.num_workers=3", "workers.envs_per_worker=5"])
    assert config.total_envs == 15


@pytest.mark.parametrize("preset", ["cartpole_dqn", "cartpole_impala"])
def test_configs_saved_by_an_older_rayrl_are_read_in_todays_layout(preset):
    config = load_config(preset, ["learner.num_learners=2"])
    old = older_layout(config_to_dict(config))
    with pytest.raises(ConfigError, match="moved to"):
        config_from_dict(old)  # as user input, the old keys are named...
    assert saved_config(old) == config  # ...but a saved run's config is migrated
    assert saved_config(old, ["learner.lr=0.5"]).learner.lr == 0.5


def test_each_algorithm_is_named_once_by_its_config_class():
    """The registry's key, `Algorithm.name` and `algorithm.name` in a config are one value:
    the default of the algorithm's config class; a config that names none gets DQN."""
    for key, algorithm in ALGORITHMS.items():
        assert algorithm.name == key == algorithm.config_class().name
    assert AlgorithmConfig().name == ""  # the base class names no algorithm
    assert config_from_dict({}).algorithm == DQNConfig()
    assert DEFAULT_ALGORITHM in ALGORITHMS
