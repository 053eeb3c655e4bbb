"""The two experience families: what they build, what they check, what persists."""

from __future__ import annotations

from dataclasses import replace

import pytest
from gymnasium import spaces

from rayrl.contract import PersistentStore
from rayrl.envs import EnvSpec, env_spec
from rayrl.errors import ConfigError
from rayrl.families import OFF_POLICY, ON_POLICY
from rayrl.families.on_policy import planned_updates
from rayrl.presets import load_config
from rayrl.processing import NStepProcessor, UnrollProcessor
from tests.parts import learner_for


def test_off_policy_builds_n_step_processing_and_a_replay_that_can_be_saved():
    config = load_config("cartpole_dqn", ["algorithm.replay.save_with_checkpoint=true"])
    spec = env_spec(config.env)
    store = OFF_POLICY.make_store(OFF_POLICY.store_settings(config, spec))
    assert isinstance(store, PersistentStore)
    assert OFF_POLICY.persists(config.algorithm)
    assert store.items_per_chunk == config.workers.envs_per_worker * 32
    processor = OFF_POLICY.make_processor(config.algorithm, spec, num_envs=8)
    assert isinstance(processor, NStepProcessor)
    assert processor.n_step == config.algorithm.n_step
    assert OFF_POLICY.chunk_steps(config.algorithm) == config.algorithm.steps_per_chunk


def test_on_policy_builds_unrolls_and_a_queue_that_is_never_saved():
    config = load_config("cartpole_impala")
    spec = env_spec(config.env)
    queue = ON_POLICY.make_store(ON_POLICY.store_settings(config, spec))
    assert not isinstance(queue, PersistentStore)
    assert not ON_POLICY.persists(config.algorithm)
    assert isinstance(ON_POLICY.make_processor(config.algorithm, spec, 8), UnrollProcessor)
    assert ON_POLICY.chunk_steps(config.algorithm) == config.algorithm.steps_per_chunk
    assert ON_POLICY.store.drops_stale
    assert not OFF_POLICY.store.drops_stale


def test_replay_settings_do_not_exist_for_on_policy_algorithms():
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm\.replay'"):
        load_config("cartpole_impala", ["algorithm.replay.save_with_checkpoint=true"])


def test_each_family_checks_its_own_settings():
    with pytest.raises(ConfigError, match=r"algorithm\.queue_capacity=8 cannot hold"):
        load_config(
            "cartpole_impala",
            ["algorithm.queue_capacity=8", "learner.batch_size=8", "learner.num_learners=2"],
        )
    with pytest.raises(ConfigError, match=r"algorithm\.replay\.min_size=10 is larger"):
        load_config("cartpole_dqn", ["algorithm.replay.min_size=10", "algorithm.replay.capacity=5"])


def test_the_on_policy_sampling_pace_counts_every_learners_unrolls():
    one_agent = EnvSpec(spaces.Box(0, 1, (10, 10, 4)), spaces.Discrete(3), None)
    assert ON_POLICY.sampling_pace(load_config("cartpole_ppo"), one_agent) is None
    config = load_config("minatar_ppo", ["learner.num_learners=2"])  # the preset's pace: 1
    pace = ON_POLICY.sampling_pace(config, one_agent)
    assert pace is not None
    assert pace.env_steps_of(1) == 2 * 64 * 128
    assert pace.lead_env_steps == 2 * pace.env_steps_of(1)
    # with 3 agents an unroll is one agent's: an update learns from a third of the env steps,
    # counted without a rounding per update (which would let the pace fall behind the learner)
    three_agents = replace(one_agent, agents=("a", "b", "c"))
    pace = ON_POLICY.sampling_pace(config, three_agents)
    assert pace is not None
    assert pace.env_steps_of(1) == 2 * 64 * 128 // 3
    assert pace.env_steps_of(300) == 300 * 2 * 64 * 128 // 3
    assert OFF_POLICY.sampling_pace(load_config("cartpole_dqn"), one_agent) is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["learner.batches_per_request=3", "algorithm.queue_capacity=192"],
            r"sample_ahead_updates=1 .* learner\.batches_per_request=3 .* at least 2, or null",
        ),
        (
            ["learner.sync_interval=4"],
            r"sample_ahead_updates=1 .* learner\.sync_interval=4 .* at least 3, or null",
        ),
        (["algorithm.max_policy_lag=1"], r"algorithm\.max_policy_lag=1 would drop .* least 2"),
    ],
)
def test_a_sampling_pace_the_learner_could_never_publish_under_is_refused(overrides, message):
    """The workers would wait for weights that need unrolls they may not sample."""
    with pytest.raises(ConfigError, match=message):
        load_config("minatar_ppo", ["algorithm.sample_ahead_updates=1", *overrides])


@pytest.mark.parametrize("preset", ["cartpole_impala", "cartpole_ppo"])
@pytest.mark.parametrize(
    ("reference", "exponent", "budget", "scale"),
    [
        (None, 0.25, 4000, 1.0),
        (1000, 0.25, 1000, 1.0),
        (1000, 0.25, 16000, 0.5),
        (1000, 0.5, 4000, 0.5),
        (1000, 0.5, 9000, 1 / 3),
        (4000, 0.5, 1000, 2.0),
    ],
)
def test_a_run_starts_at_the_rate_scaled_from_its_reference_budget_to_its_own(
    preset, reference, exponent, budget, scale
):
    """`algorithm.lr_reference_env_steps`: a budget sixteen times the reference starts at half
    the rate with the exponent of 1/4, four times at half with 1/2, a quarter of it at twice;
    the linear decay then runs from the rate it starts at, and a restored learner keeps it."""
    overrides = [
        "learner.lr=0.002",
        f"algorithm.lr_reference_env_steps={'null' if reference is None else reference}",
        f"algorithm.lr_budget_exponent={exponent}",
        f"run.total_env_steps={budget}",
        "algorithm.lr_decay=true",
    ]
    config = load_config(preset, overrides)
    spec = env_spec(config.env)
    learner = learner_for(config, spec)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(0.002 * scale)
    learner.scheduler.step()  # one update's decay
    total = planned_updates(config.algorithm, config.learner, config.run, spec)
    decayed = 0.002 * scale * (1 - 1 / total)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(decayed)
    restored = learner_for(config, spec)
    restored.load_state_dict(learner.state_dict())
    assert restored.optimizer.param_groups[0]["lr"] == pytest.approx(decayed)
    assert float(restored.optimizer.param_groups[0]["lr"]) == pytest.approx(decayed)


@pytest.mark.parametrize("preset", ["cartpole_impala", "cartpole_ppo"])
def test_a_run_resumed_with_a_larger_budget_goes_on_at_the_rate_scaled_for_it(preset):
    """Resuming with a larger `run.total_env_steps` scales the rate for the new budget (the
    checkpoint's rate is not kept), from the restored step of the stretched decay."""
    overrides = [
        "learner.lr=0.002",
        "algorithm.lr_reference_env_steps=1000",
        "algorithm.lr_budget_exponent=0.5",
        "algorithm.lr_decay=true",
    ]
    short = load_config(preset, [*overrides, "run.total_env_steps=4000"])
    longer = load_config(preset, [*overrides, "run.total_env_steps=9000"])
    spec = env_spec(short.env)
    learner = learner_for(short, spec)
    learner.scheduler.step()
    resumed = learner_for(longer, spec)
    resumed.load_state_dict(learner.state_dict())
    total = planned_updates(longer.algorithm, longer.learner, longer.run, spec)
    decayed = 0.002 / 3 * (1 - 1 / total)
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(decayed)
    assert float(resumed.optimizer.param_groups[0]["lr"]) == pytest.approx(decayed)


def test_an_exponent_without_a_reference_budget_is_refused():
    """`algorithm.lr_budget_exponent` alone would scale nothing: named, before any work."""
    with pytest.raises(ConfigError, match=r"algorithm\.lr_budget_exponent=0\.5 scales nothing"):
        load_config("cartpole_ppo", ["algorithm.lr_budget_exponent=0.5"])
