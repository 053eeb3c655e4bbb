"""The Python API: everything the CLI does, callable from a notebook or a script.

import rayrl
result = rayrl.train("cartpole_dqn", overrides=["run.total_env_steps=50000"])
print(result.final_eval.mean, result.run_dir)
rayrl.evaluate(result.run_dir, episodes=10)
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rayrl.algorithms import ALGORITHMS
from rayrl.checkpoint import load_checkpoint, policy_of, warm_start
from rayrl.config import Config
from rayrl.contract import Acting
from rayrl.core import EvalResult
from rayrl.envs import (
    EnvSpec,
    VectorEnvAdapter,
    check_env,
    check_normalization,
    eval_env_config,
    make_env,
    spec_of,
)
from rayrl.envs.pettingzoo import PREFIX, is_trusted, module_of
from rayrl.errors import CheckpointError, ConfigError, UserError
from rayrl.evaluation import Evaluator
from rayrl.host import check_supported
from rayrl.normalization import normalization_mismatch, reward_normalization_mismatch
from rayrl.presets import load_config, saved_config, with_overrides
from rayrl.recorders import Recorder, Recorders, make_recorders
from rayrl.roles import Policy
from rayrl.run_lifecycle import TrainResult, stop_if_interrupted
from rayrl.run_writer import RunWriter
from rayrl.rundir import RunDirectory
from rayrl.session import Counters, TrainingSession
from rayrl.video import check_video_support

logger = logging.getLogger(__name__)


def validate(config: Config, checkpoint: dict[str, Any] | None = None) -> None:
    """Everything that can be checked before work starts: the env ids, that the algorithm
    can act in that env (its spaces, the network: one real observation goes through a CPU
    policy and its action into the env), and that a checkpoint to resume or warm-start from
    fits the configured network."""
    check_env(config.env)
    if config.logging.video_interval_evals is not None:
        check_video_support(eval_env_config(config.env))
    env = make_env(config.env, 1, training=False)
    try:
        spec = spec_of(env, config.env)
        check_normalization(config.env, spec, env.raw_observation_space)
        acting = Acting.for_evaluation(config.run.seed)
        algorithm = ALGORITHMS[config.algorithm.name]
        policy = algorithm.build_policy(config.algorithm, spec, acting)
        algorithm.family.store_settings(config, spec)  # a store that holds a chunk
        _check_weights(config, spec, policy, checkpoint)
        _act_once(config, env, policy)
    finally:
        env.close()


def _check_weights(
    config: Config, spec: EnvSpec, policy: Policy, checkpoint: dict[str, Any] | None
) -> None:
    """Load the weights a run starts from (a checkpoint to resume, a warm start) into
    `policy`, refusing those that do not fit its network or normalisation."""
    sources = []
    if checkpoint is not None:
        rewards = reward_normalization_mismatch(checkpoint["learner"], spec.reward_clip is not None)
        if rewards is not None:
            raise CheckpointError(f"the checkpoint to resume from {rewards}")
        sources.append(("the checkpoint to resume from", policy_of(checkpoint)))
    elif (weights := warm_start(config.run.init_checkpoint, config.algorithm.name)) is not None:
        sources.append((f"run.init_checkpoint={config.run.init_checkpoint!r}", weights))
    for what, weights in sources:
        if (
            problem := normalization_mismatch(weights, spec.observation_clip is not None)
        ) is not None:
            raise CheckpointError(f"{what} {problem}")
        try:
            policy.set_weights(weights)
        except (RuntimeError, KeyError) as exc:
            first_line = str(exc).strip().splitlines()[0]
            raise CheckpointError(
                f"{what} does not fit the configured network: {first_line}"
            ) from None


def _act_once(config: Config, env: VectorEnvAdapter, policy: Policy) -> None:
    """One real observation through `policy`, as the evaluation acts and as the workers do
    (an algorithm may act at random at first, without its network), and the workers' action
    into `env`: what would fail in every worker fails here first, in one line (its
    traceback in the log at debug level)."""
    try:
        obs = env.reset(seed=config.run.seed)
        policy.act(obs, env.episode_starts, explore=False)
        output = policy.act(obs, env.episode_starts, explore=True)
        env.step(output.actions, output.extras, output.state)
    except UserError:
        raise
    except Exception as exc:  # what the workers would meet: the first line says which
        logger.debug("the pre-flight's action failed", exc_info=True)
        first_line = (str(exc).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"algorithm.name={config.algorithm.name!r} cannot act in env.id={config.env.id!r} "
            f"(observations {env.raw_observation_space}, actions "
            f"{env.single_action_space}): {type(exc).__name__}: {first_line}"
        ) from None


def resolve(
    config: Config | str | Path | None = None,
    overrides: Sequence[str] = (),
    resume: str | Path | None = None,
    resume_if_exists: bool = False,
) -> tuple[Config, RunDirectory | None]:
    """The config of a run: a preset name, YAML path or Config (None: the default preset)
    with overrides; or, with `resume` (or `resume_if_exists` and a run directory of that
    `run.name` already there), the saved config of that run with overrides."""
    if resume is None:
        if isinstance(config, Config):
            fresh = with_overrides(config, overrides)
        else:
            fresh = load_config(config, overrides)
        if not resume_if_exists:
            return fresh, None
        if fresh.run.name is None:
            raise ConfigError(
                "resume_if_exists (--resume-if-exists) needs run.name: the fixed run "
                "directory that a retried job comes back to"
            )
        existing = Path(fresh.run.runs_dir) / fresh.run.name
        if not (existing / "config.yaml").is_file():
            return fresh, None
        logger.info("run directory %s exists: resuming it", existing)
        resume = existing
    run_dir = RunDirectory.open(resume)
    return saved_config(run_dir.raw_config(), overrides), run_dir


def train(
    config: Config | str | Path | None = None,
    *,
    overrides: Sequence[str] = (),
    resume: str | Path | None = None,
    resume_if_exists: bool = False,
    address: str | None = None,
    dashboard: bool = False,
    started_at: float | None = None,
    trust_env: bool = False,
    recorders: Sequence[Recorder] = (),
) -> TrainResult:
    """Train until a stop condition and return how the run ended.

    Args:
        config: a `Config`, a preset name or a YAML path; None is the default preset.
        overrides: `dotted.key=value` strings applied on top.
        resume: a run directory to continue from its latest checkpoint (its saved config,
            plus `overrides`, e.g. a different `workers.num_workers` or a longer
            `run.total_env_steps`). A run killed before its first checkpoint starts again
            from the beginning in its directory.
        resume_if_exists: resume the run directory named by `run.name` if it exists, else
            start it (what a retried cluster job runs).
        address: Ray cluster to join ("auto", "ray://host:port", "host:port"); None starts
            a local Ray sized to this machine (Ray runtime only).
        dashboard: start the Ray dashboard with a local Ray (it costs about a second and
            1 GB of memory, so it is off by default).
        started_at: `time.time()` at which the user started the run; time-to-target and time
            budgets count from it (default: now).
        trust_env: let `resume` build a "module:EnvId" env named in the run's saved config
            (which imports that module, running its code); refused without it.
        recorders: more places for the run's metrics, beside those the config asks for
            (a sweep's trial reports its evaluations to Ray Tune through one).

    Nothing is written into the run directory until the pre-flight checks pass (a resume
    they refuse leaves its config and metrics as they were; a new run they refuse leaves no
    directory behind).
    """
    check_supported()
    started_at = time.time() if started_at is None else started_at
    config, run_dir = resolve(config, overrides, resume, resume_if_exists)
    if run_dir is None:
        validate(config)
        payload: dict[str, Any] | None = None
        counters = Counters()
        try:
            run_dir = RunDirectory.create(config, f"{_label(config)}")
        except OSError as error:
            raise UserError(
                f"run.runs_dir={config.run.runs_dir!r}: cannot create a run directory there "
                f"({error.strerror or error}); choose a directory this user can write to"
            ) from None
    else:
        if resume is not None:  # resume_if_exists: the user's own config names the env
            check_trusted_env(config, f"run directory '{run_dir.root}'", trust_env)
        try:
            run_dir.lock()
        except OSError as error:
            raise UserError(
                f"cannot write into the run directory {run_dir.root}: {error.strerror or error}"
            ) from None
        try:
            payload, counters = resume_point(run_dir, config)
            validate(config, payload)
        except BaseException:
            run_dir.release()
            raise
    try:
        return _train(config, run_dir, payload, counters, started_at, address, dashboard, recorders)
    except BaseException:
        # a new run refused by a pre-flight check, or stopped (an interrupt, a failure)
        # before it wrote anything: it leaves nothing behind
        with contextlib.suppress(OSError):  # never in place of the error that ended it
            run_dir.remove_if_unused()
        raise
    finally:
        run_dir.release()


def check_trusted_env(config: Config, source: str, trust_env: bool) -> None:
    """Refuse a config read from a file (a run directory, a checkpoint) whose env id is
    "module:EnvId" unless `trust_env`: building that env imports the module, which runs its
    code, and such a file may have come from anyone. PettingZoo ids of the packages rayrl's
    extra installs ("pettingzoo:mpe2.simple_spread_v3") import only those packages' code."""
    for key, env_id in (("env.id", config.env.id), ("env.eval_id", config.env.eval_id)):
        if env_id is not None and ":" in env_id and not trust_env and not is_trusted(env_id):
            module = module_of(env_id) if env_id.startswith(PREFIX) else env_id.split(":")[0]
            raise UserError(
                f"{source} names {key}={env_id!r}, which imports the module '{module}' "
                "(running its code) to build the env; if you trust where it came from, pass "
                "--trust-env (trust_env=True in Python)"
            )


def resume_point(run_dir: RunDirectory, config: Config) -> tuple[dict[str, Any] | None, Counters]:
    """The checkpoint a resumed run continues from and its counters; none (a fresh start in
    the same directory) when the run was stopped before its first checkpoint. The best
    return is the best of `latest.pt`'s and `best.pt`'s, so that `best.pt` is only ever
    replaced by a better evaluation."""
    payload, counters = None, Counters()
    if run_dir.latest_checkpoint.is_file():
        payload = load_checkpoint(run_dir.latest_checkpoint, algorithm=config.algorithm.name)
        counters = Counters.from_dict(payload["counters"])
        logger.info("resuming %s at %d env steps", run_dir.root, counters.env_steps)
    else:
        logger.warning(
            "%s has no checkpoint yet: starting the run again from the beginning",
            run_dir.root,
        )
    if run_dir.best_checkpoint.is_file():  # evaluations may have saved one before latest.pt
        best = load_checkpoint(run_dir.best_checkpoint)["counters"]["best_eval_return"]
        counters.best_eval_return = max(counters.best_eval_return, float(best))
    return payload, counters


def _train(
    config: Config,
    run_dir: RunDirectory,
    payload: dict[str, Any] | None,
    counters: Counters,
    started_at: float,
    address: str | None,
    dashboard: bool,
    recorders: Sequence[Recorder] = (),
) -> TrainResult:
    """The run itself, with its recorders closed (and told the exit code) however it ends."""
    writer = RunWriter(config.faults.max_write_errors)
    open_recorders = functools.partial(
        make_recorders,
        config,
        run_dir,
        writer,
        counters.env_steps,
        counters.elapsed_s,
        extra=recorders,
    )
    store = ALGORITHMS[config.algorithm.name].family.store
    session = TrainingSession(
        config, run_dir, Recorders([]), counters, started_at, store, writer, open_recorders
    )
    exit_code = 1  # what W&B is told if the run raises
    try:
        if config.run.runtime == "local":
            from rayrl.local_runtime import train_local

            result = train_local(config, session, payload)
        else:
            from rayrl.ray.runtime import train_ray

            stop_if_interrupted()  # one that came while Ray's modules were imported
            result = train_ray(config, session, payload, address=address, dashboard=dashboard)
        exit_code = result.exit_code
        return result
    except UserError:
        exit_code = 2  # what the CLI exits with
        raise
    except KeyboardInterrupt:
        exit_code = 130  # interrupted again while the run ended
        raise
    finally:
        session.recorders.close(exit_code)


def _label(config: Config) -> str:
    env = config.env.id.split(":")[-1].split("/")[-1].split("-v")[0].lower()
    return f"{env}-{config.algorithm.name}"


def checkpoint_path(path: str | Path, which: str = "best") -> Path:
    """A checkpoint file from a run directory (`best`, else `latest`) or a file path."""
    path = Path(path)
    if path.is_dir():
        run_dir = RunDirectory.open(path)
        preferred = run_dir.best_checkpoint if which == "best" else run_dir.latest_checkpoint
        if preferred.is_file():
            return preferred
        if run_dir.latest_checkpoint.is_file():
            return run_dir.latest_checkpoint
        raise CheckpointError(f"run directory '{path}' has no checkpoint yet")
    return path


def evaluate(
    path: str | Path, episodes: int = 10, which: str = "best", trust_env: bool = False
) -> EvalResult:
    """Evaluate a run's best (or latest) checkpoint, or a checkpoint file, with the run's
    evaluation protocol (`algorithm.eval_epsilon` or `algorithm.eval_policy`).

    A checkpoint's config names the env to build. A "module:EnvId" id imports that module,
    which runs its code, so such a checkpoint is refused unless `trust_env` (a checkpoint
    from a W&B artifact or a colleague could otherwise run anything on `sys.path`)."""
    check_supported()
    checkpoint = checkpoint_path(path, which)
    payload = load_checkpoint(checkpoint)
    config = saved_config(payload["config"])
    check_trusted_env(config, f"checkpoint '{checkpoint}'", trust_env)
    check_env(config.env)
    run = config.run
    evaluator = Evaluator(config.env, config.algorithm, episodes, run.seed, torch_threads=1)
    try:
        evaluator.policy.set_weights(policy_of(payload))
    except (RuntimeError, KeyError) as exc:
        raise CheckpointError(
            f"checkpoint '{checkpoint}' does not fit its own config's network: {exc}"
        ) from None
    try:
        return evaluator.evaluate(None, episodes)
    finally:
        evaluator.close()
