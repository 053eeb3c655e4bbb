"""A sweep's spec is checked whole before any trial starts, one line per error; the outcome
ranks settings over their seeds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rayrl.errors import ConfigError
from rayrl.sweeps import sweep
from rayrl.sweeps.resources import UNPLACED, trial_bundles
from rayrl.sweeps.results import TrialOutcome, rank, settings_table
from rayrl.sweeps.spec import load_sweep, override, shipped_specs

BASE = {"base": "cartpole_ppo", "set": ["run.runtime=local"]}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"spaces": {}}, "unknown key 'spaces' (did you mean 'space'?)"),
        ({"space": {"learner.lrr": {"choice": [1e-3]}}}, "unknown key 'learner.lrr'"),
        (
            {"space": {"learner.lr": {"uniform": [-1.0, 1.0]}}},
            "space.learner.lr: learner.lr=-1.0 is out of range; valid: > 0.0",
        ),
        (
            {"space": {"workers.num_workers": {"choice": [2, 0]}}},
            "space.workers.num_workers: workers.num_workers=0 is out of range",
        ),
        ({"space": {"learner.lr": {"normal": [0, 1]}}}, "unknown domain 'normal'"),
        ({"space": {"learner.lr": [1e-3, 1e-4]}}, "is not a domain"),
        ({"space": {"learner.lr": {"loguniform": [1e-3, 1e-4]}}}, "expected low < high"),
        ({"space": {"algorithm.epochs": {"randint": [2, 4.5]}}}, "expected integers"),
        ({"space": {"run.seed": {"choice": [1, 2]}}}, "vary the seed with `seeds`"),
        ({"seeds": [0, 0]}, "repeats a seed"),
        ({"seeds": [-1]}, "seeds[0]=-1 is out of range"),
        ({"metric": "eval/return"}, "metric='eval/return' is not reported by trials"),
        ({"scheduler": {"name": "hyperband"}}, "scheduler.name='hyperband' is not valid"),
        (
            {"scheduler": {"name": "pbt"}, "space": {"learner.lr": {"grid": [1e-3, 1e-4]}}},
            "a grid cannot be perturbed",
        ),
        ({"scheduler": {"name": "pbt"}}, "needs a space to perturb"),
        (
            {"scheduler": {"name": "asha", "grace_env_steps": 10**9}},
            "ASHA could never stop a trial",
        ),
        ({"set": ["env.id=NoSuchEnv-v0"]}, "NoSuchEnv-v0"),
        ({"name": "a/b"}, "name='a/b' is not a plain directory name"),
    ],
)
def test_bad_specs_are_refused_in_one_line_naming_the_key(spec, message):
    with pytest.raises(ConfigError) as refused:
        load_sweep({**BASE, **spec})
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_commands_set_applies_to_the_base_and_pbt_checkpoints_at_every_evaluation():
    sweep = load_sweep(
        {
            **BASE,
            "space": {"learner.lr": {"loguniform": [1e-4, 1e-2]}},
            "scheduler": {"name": "pbt"},
        },
        ["run.eval_interval_env_steps=1024"],
    )
    assert sweep.base.run.runtime == "local"
    assert sweep.base.run.checkpoint_interval_env_steps == 1024
    assert sweep.perturbation_interval() == 5 * 1024
    assert sweep.config_with({"learner.lr": 0.005, "run.seed": 3}).learner.lr == 0.005


@pytest.mark.parametrize("name", sorted(shipped_specs()))
def test_shipped_specs_are_valid(name):
    assert name.endswith("_sweep")
    sweep = load_sweep(name)
    assert sweep.domains


def test_a_relative_base_file_is_read_from_the_specs_folder(tmp_path: Path):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"env": {"id": "CartPole-v1"}}))
    spec = tmp_path / "my_sweep.yaml"
    spec.write_text(yaml.safe_dump({"base": "base.yaml", "num_trials": 2}))
    assert load_sweep(spec).base.env.id == "CartPole-v1"


def outcome(trial: int, lr: float, seed: int, value: float | None, steps: int, status: str):
    return TrialOutcome(
        f"t{trial}", {"learner.lr": lr, "run.seed": seed}, value, steps, status, None, Path(".")
    )


def test_settings_rank_by_their_mean_over_seeds_then_by_fewer_env_steps():
    trials = [
        outcome(0, 1e-3, 0, 500.0, 30_000, "finished"),
        outcome(1, 1e-3, 1, 300.0, 50_000, "finished"),  # mean 400
        outcome(2, 3e-3, 0, 450.0, 20_000, "finished"),
        outcome(3, 3e-3, 1, 350.0, 20_000, "finished"),  # mean 400, fewer steps
        outcome(4, 1e-4, 0, 20.0, 8_000, "stopped early"),
        outcome(5, 1e-4, 1, None, 0, "failed"),
        outcome(6, 1e-5, 0, None, 0, "failed"),
    ]
    ranked = rank(trials, "max")
    assert [group.settings["learner.lr"] for group in ranked] == [3e-3, 1e-3, 1e-4, 1e-5]
    assert ranked[0].mean == 400.0
    assert ranked[0].std == 50.0
    assert ranked[2].values == [20.0]  # the failed seed does not count
    assert ranked[0].set_options() == "--set learner.lr=0.003"
    # a setting stopped early never wins on its early evaluation, whichever the mode
    assert [group.settings["learner.lr"] for group in rank(trials, "min")][2] == 1e-4
    table = settings_table(ranked, "eval/return_mean").splitlines()
    assert table[0].split()[:3] == ["rank", "learner.lr", "seeds"]
    assert "failed, stopped early" in table[4]


def test_a_settings_mean_is_of_its_seeds_that_ran_to_their_end():
    trials = [
        outcome(0, 1e-3, 0, 480.0, 30_000, "finished"),
        outcome(1, 1e-3, 1, 90.0, 8_000, "stopped early"),
        outcome(2, 3e-3, 0, 300.0, 30_000, "finished"),
    ]
    ranked = rank(trials, "max")
    assert ranked[0].values == [480.0]
    assert ranked[0].env_steps == 30_000  # of the seed counted
    assert settings_table(ranked, "m").splitlines()[2].split()[2] == "1/2"


def test_at_equal_means_more_seeds_that_got_there_rank_first():
    trials = [
        outcome(0, 1e-3, 0, 500.0, 6_000, "finished"),
        outcome(1, 1e-3, 1, 20.0, 4_000, "stopped early"),
        outcome(2, 3e-3, 0, 500.0, 18_000, "finished"),
        outcome(3, 3e-3, 1, 500.0, 19_000, "finished"),
    ]
    assert [group.settings["learner.lr"] for group in rank(trials, "max")] == [3e-3, 1e-3]


def test_settings_become_set_options_that_read_back_as_themselves():
    assert override("env.id", "CartPole-v1") == "env.id=CartPole-v1"
    assert override("env.id", "null") == 'env.id="null"'
    assert override("run.name", "a: b") == 'run.name="a: b"'
    assert override("learner.lr", 1e-05) == "learner.lr=1e-05"
    assert override("algorithm.hidden_sizes", [64, 64]) == "algorithm.hidden_sizes=[64, 64]"


def test_pbt_is_refused_a_key_that_changes_what_a_trial_reserves(tmp_path: Path):
    spec = {
        **BASE,
        "sweeps_dir": str(tmp_path),
        "space": {"workers.num_workers": {"choice": [1, 2]}},
        "scheduler": {"name": "pbt"},
    }
    with pytest.raises(ConfigError, match=r"space\.workers\.num_workers: it changes what a trial"):
        sweep({**spec, "set": ["run.runtime=ray"]})
    assert not list(tmp_path.iterdir())  # refused before the sweep's directory


def test_pbt_perturbations_stay_within_the_spaces_ranges():
    sweep = load_sweep(
        {
            **BASE,
            "space": {
                "learner.lr": {"loguniform": [1e-4, 1e-2]},
                "algorithm.epochs": {"randint": [2, 8]},
                "algorithm.entropy_coef": {"choice": [0.0, 0.01]},
            },
            "scheduler": {"name": "pbt"},
        }
    )
    # x1.2 and x0.8 of values at the ends, as PBT's explore makes them
    settings = {"learner.lr": 1.2e-2, "algorithm.epochs": 9.6, "algorithm.entropy_coef": 0.01}
    clipped = sweep.within_ranges(settings)
    assert clipped == {"learner.lr": 1e-2, "algorithm.epochs": 8, "algorithm.entropy_coef": 0.01}
    assert sweep.within_ranges({"learner.lr": 0.8e-4})["learner.lr"] == 1e-4


def test_what_a_trial_reserves_follows_its_runtime_and_config():
    local = load_sweep({**BASE, "set": ["run.runtime=local"]}).base
    (bundle,) = trial_bundles(local, UNPLACED)
    assert bundle["CPU"] == 1.0
    assert bundle["memory"] > 0  # its store's
    assert "GPU" not in bundle  # no GPU in the cluster
    ray_runtime = load_sweep(
        {**BASE, "set": ["run.runtime=ray", "workers.num_workers=3", "learner.num_gpus=1"]}
    ).base
    head, learner, *workers = trial_bundles(ray_runtime, UNPLACED)
    assert head == {}  # the trial's driver: Tune's empty head bundle
    assert "CPU" not in learner  # a learner with a GPU asks for no CPU (learner_cpus)
    assert learner["GPU"] == 1.0
    assert learner["memory"] > 0
    assert workers == [{"CPU": 1.0}] * 3
    on_cpu = load_sweep({**BASE, "set": ["run.runtime=ray", "learner.num_gpus=0"]}).base
    assert trial_bundles(on_cpu, UNPLACED)[1]["CPU"] == 1.0


def test_a_saved_spec_with_keys_renamed_since_resumes_under_their_new_names():
    """A sweep saved before a key was renamed must still resume: its saved spec, and the
    settings Tune restores for its trials, still use the old names."""
    old = {
        **BASE,
        "set": [*BASE["set"], "faults.call_timeout_s=30", "workers.steps_per_chunk=7"],
        "space": {"algorithm.num_steps": {"choice": [16, 32]}},
    }
    with pytest.raises(ConfigError, match=r"it moved to 'algorithm\.steps_per_chunk'"):
        load_sweep(old)  # a new sweep names what it means today
    checked = load_sweep(old, saved=True)
    assert [domain.key for domain in checked.domains] == ["algorithm.steps_per_chunk"]
    faults = checked.base.faults
    assert (faults.probe_timeout_s, faults.stall_timeout_s) == (30, 30)
    assert checked.base.algorithm.steps_per_chunk != 7  # PPO never read the workers' one
    restored = checked.config_with({"algorithm.num_steps": 16, "run.seed": 3})
    assert (restored.algorithm.steps_per_chunk, restored.run.seed) == (16, 3)
