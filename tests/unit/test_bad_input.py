"""Bad input that the config (and the env suite) refuses before anything starts: the real
`rayrl train` command (click's runner, in this process) exits with status 2 and one line
naming the key, the value and what is valid, within seconds, before a run directory is
created (nothing at all appears beside or under `run.runs_dir`).

Each run is small and local (`tiny`, `--runtime local`), so that an input that were
accepted would train to the end in seconds and fail on its exit status, not hang."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from rayrl.cli import main

REFUSED_WITHIN_S = 60.0


@pytest.fixture
def refused(tmp_path, tiny, tiny_run):
    """Run `rayrl train` with `tiny` (`tiny_run` for another preset) plus the given overrides
    in an empty `tmp_path` (the runs directory is `tmp_path/runs`); assert the refusal and
    return its one line."""

    def run(*overrides: str, config: str | None = None) -> str:
        args = ["train", "--runtime", "local"]
        if config is not None:
            args += ["--config", config]
        for override in (*(tiny if config is None else tiny_run), *overrides):
            args += ["--set", override]
        started = time.monotonic()
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        elapsed = time.monotonic() - started
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error: ")
        assert elapsed < REFUSED_WITHIN_S
        assert list(tmp_path.iterdir()) == [], "a run directory was created"
        return lines[0]

    return run


@pytest.mark.parametrize(
    "name", ["../escape", "ABSOLUTE", "a/b", '""', ".", "..", ".hidden", '"a\\0b"', "x" * 256]
)
def test_a_run_name_that_is_not_one_plain_directory_is_refused(refused, tmp_path, name):
    """A path would train in a directory outside run.runs_dir (`..`, absolute), or fail at
    its end (`a/b`), or in run.runs_dir itself (`""`, `.`)."""
    if name == "ABSOLUTE":
        name = str(tmp_path / "elsewhere")
    line = refused(f"run.name={name}")
    assert "run.name=" in line
    assert "is not a plain directory name" in line
    assert "letters, digits, '.', '_', '+' and '-', not starting with '.' or '+'" in line


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ("{num_envs: 3}", "'num_envs' is set by workers.envs_per_worker"),
        ("{vectorization_mode: async}", "'vectorization_mode' is set by rayrl"),
        ("{vector_kwargs: {}}", "'vector_kwargs' is set by rayrl"),
        ("{wrappers: []}", "'wrappers' is set by rayrl"),
        ("{render_mode: human}", "'render_mode' is set by rayrl"),
        ("{max_episode_steps: 50}", "'max_episode_steps' is set by env.max_episode_steps"),
        ("{id: Acrobot-v1}", "'id' is set by env.id"),
    ],
)
def test_env_kwargs_that_the_env_family_sets_are_refused(refused, kwargs, named):
    line = refused(f"env.kwargs={kwargs}")
    assert line.startswith("error: env.kwargs=")
    assert named in line
    assert "env.kwargs holds only the env's own constructor arguments" in line


def test_every_family_set_key_of_env_kwargs_is_named(refused):
    line = refused("env.kwargs={num_envs: 3, vectorization_mode: async}")
    assert "'num_envs' is set by" in line
    assert "'vectorization_mode' is set by" in line


def test_minatar_kwargs_set_from_env_settings_are_refused(refused):
    line = refused("env.kwargs={sticky_action_prob: 0.5}", config="minatar_dqn")
    assert "'sticky_action_prob' is set by env.repeat_action_probability" in line


def test_env_kwargs_the_env_does_not_take_are_refused(refused):
    line = refused("env.kwargs={no_such_argument: 1}")
    assert "env.kwargs={'no_such_argument': 1} does not fit 'CartPole-v1'" in line
    assert "unexpected keyword argument 'no_such_argument'" in line


@pytest.mark.parametrize(
    ("config", "sizes", "named"),
    [
        (None, "[-1]", "algorithm.hidden_sizes[0]=-1"),
        (None, "[0]", "algorithm.hidden_sizes[0]=0"),
        (None, "[64, 0]", "algorithm.hidden_sizes[1]=0"),
        ("cartpole_ppo", "[0]", "algorithm.hidden_sizes[0]=0"),
    ],
)
def test_network_sizes_must_be_positive(refused, config, sizes, named):
    line = refused(f"algorithm.hidden_sizes={sizes}", config=config)
    assert f"{named} is out of range; valid: >= 1" in line


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "gpu", "CUDA", "cuda:-1"])
def test_a_device_torch_does_not_know_is_refused_by_the_config(refused, device):
    """Without this check the local learner refuses it too, but only once the run directory
    exists (and a Ray learner at every start)."""
    line = refused(f"learner.device={device}")
    assert f"learner.device='{device}' is not a torch device" in line
    assert "'auto'" in line
    assert "'cuda:N'" in line


@pytest.mark.parametrize("amount", ["1.5", "0.00001"])
def test_a_gpu_amount_ray_cannot_schedule_is_refused(refused, amount):
    line = refused(f"learner.num_gpus={amount}")
    assert "learner.num_gpus=" in line
    assert "a fraction of one GPU from 0.0001 to 1, or a whole number" in line


@pytest.mark.parametrize("command", [["train"], ["sweep", "cartpole_ppo_sweep"]])
def test_windows_is_refused_in_one_line_before_anything_starts(monkeypatch, tmp_path, command):
    """rayrl runs on Linux and macOS (`rayrl.host`): on Windows every command says so in one
    line, with the user-error status, and leaves nothing behind."""
    monkeypatch.setattr("sys.platform", "win32")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2
    assert result.output.startswith("error: rayrl runs on Linux and macOS, not on Windows")
    assert "WSL 2" in result.output
    assert list(tmp_path.iterdir()) == []
