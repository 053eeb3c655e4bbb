"""The `rayrl` command line.

User errors (bad config, unknown env, missing checkpoint) print one line and exit with
status 2; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

import click

from rayrl.compat.interpreter import EXIT_INTERRUPTED, exit_code_of, exit_now
from rayrl.errors import UserError
from rayrl.host import check_supported

EXIT_USER_ERROR = 2


def _user_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a `UserError` into one line on stderr and exit status 2 (unless --debug)."""

    @click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
    @functools.wraps(command)
    def wrapper(*args: Any, debug: bool, **kwargs: Any) -> Any:
        logging.basicConfig(
            level=logging.DEBUG if debug else logging.INFO,
            format="%(asctime)s %(name)s: %(message)s",
            datefmt="%H:%M:%S",
        )
        try:
            check_supported()
            return command(*args, **kwargs)
        except UserError as exc:
            if debug:
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_USER_ERROR)

    return wrapper


config_option = click.option(
    "--config",
    "-c",
    "config",
    default=None,
    metavar="NAME_OR_PATH",
    help="A preset name (see `rayrl presets`) or a YAML file. Default: cartpole_dqn.",
)
address_option = click.option(
    "--address",
    default=None,
    metavar="ADDRESS",
    help="Join a running Ray cluster: auto (the Ray `ray start` started on this machine), "
    "host:port or ray://host:port (or RAY_ADDRESS). "
    "Default: start a local Ray, and stop it at the end.",
)
set_option = click.option(
    "--set",
    "-s",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config value, e.g. --set learner.lr=1e-4 (repeatable; values are YAML).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rayrl")
def main() -> None:
    """rayrl: scalable actor-learner reinforcement learning on Ray."""


def run(prog_name: str | None = None) -> NoReturn:
    """The console script (and `python -m rayrl`): `main`, then an exit that skips the
    interpreter's finalization (`rayrl.compat.interpreter`)."""
    code = 0
    try:
        main(prog_name=prog_name)
    except SystemExit as exit_:  # how click ends every command
        code = exit_code_of(exit_.code)
    exit_now(code)


@main.command()
@config_option
@set_option
@click.option(
    "--resume",
    metavar="RUN_DIR",
    default=None,
    help="Continue a run from its latest checkpoint (its saved config, plus --set overrides).",
)
@click.option(
    "--resume-if-exists",
    is_flag=True,
    help="Resume the run directory named by run.name if it exists, else start it (for jobs "
    "that are retried).",
)
@click.option(
    "--runtime",
    type=click.Choice(["ray", "local"]),
    default=None,
    help="Shortcut for --set run.runtime=...: Ray actors (default) or one process.",
)
@address_option
@click.option(
    "--dashboard", is_flag=True, help="Start the Ray dashboard with the local Ray (off: faster)."
)
@click.option(
    "--trust-env",
    is_flag=True,
    help="With --resume: build a 'module:EnvId' env named in the run's saved config (this "
    "imports the module, running its code).",
)
@_user_errors
def train(
    config: str | None,
    overrides: tuple[str, ...],
    resume: str | None,
    resume_if_exists: bool,
    runtime: str | None,
    address: str | None,
    dashboard: bool,
    trust_env: bool,
) -> None:
    """Train an agent (default: DQN on CartPole with the Ray runtime)."""
    started_at = time.time()
    from rayrl.api import train as run_training
    from rayrl.run_lifecycle import handle_interrupts

    # Ctrl-C, `kill`, `ray job stop` and Kubernetes: stop sampling, final checkpoint, W&B
    # closed, rather than dying mid-write
    handle_interrupts()

    if resume is not None and config is not None:
        raise UserError("--resume continues a run with its saved config; drop --config")
    overrides = overrides + ((f"run.runtime={runtime}",) if runtime else ())
    try:
        result = run_training(
            config,
            overrides=overrides,
            resume=resume,
            resume_if_exists=resume_if_exists,
            address=address,
            dashboard=dashboard,
            started_at=started_at,
            trust_env=trust_env,
        )
    except KeyboardInterrupt:  # while it started, or a second one while it ended: at once
        click.echo("stopped: interrupted, without a final checkpoint", err=True)
        sys.exit(EXIT_INTERRUPTED)
    counters = result.counters
    click.echo("")
    click.echo(result.summary)
    cause = f" ({result.failure})" if result.failure else ""
    click.echo(
        f"stopped: {result.stop_reason}{cause} after {result.wall_s:.1f} s "
        f"({counters.env_steps:,} env steps, {counters.updates:,} learner updates)"
    )
    if result.final_eval is not None:
        evaluation = result.final_eval
        click.echo(
            f"final evaluation: mean return {evaluation.mean:.1f} over {len(evaluation.returns)} "
            f"episodes (std {evaluation.returns.std():.1f}, min {evaluation.returns.min():.1f}, "
            f"max {evaluation.returns.max():.1f})"
        )
    if result.target_reached_s is not None:
        click.echo(f"target return reached in {result.target_reached_s:.1f} s")
    learner = result.placement.get("learner")
    if learner:
        click.echo(f"learner ran on Ray node {learner['node_id'][:12]}, device {learner['device']}")
    click.echo(f"run directory: {result.run_dir}")
    for problem in result.problems:
        click.echo(f"warning: {problem}")
    sys.exit(result.exit_code)


@main.command()
@click.argument("spec", required=False, metavar="SPEC")
@set_option
@click.option(
    "--resume",
    metavar="SWEEP_DIR",
    default=None,
    help="Continue an interrupted sweep: finished trials kept, the others from their checkpoints.",
)
@address_option
@_user_errors
def sweep(spec: str | None, overrides: tuple[str, ...], resume: str | None, address: str | None):
    """Run a sweep of trials on Ray Tune. SPEC: a sweep YAML file, or the name of a shipped
    one (cartpole_ppo_sweep); --set applies to every trial's base config."""
    from rayrl.sweeps import sweep as run_sweep

    result = run_sweep(spec, overrides, resume=resume, address=address)
    click.echo("")
    click.echo(result.table())
    counts = ", ".join(
        f"{result.count(status)} {status}"
        for status in ("finished", "stopped early", "failed", "unfinished")
        if result.count(status)
    )
    click.echo(f"{len(result.trials)} trials: {counts}")
    best = result.best
    if best is not None:
        click.echo(f"best settings: {best.set_options()}")
        click.echo(f"best config: {result.best_config} (rayrl train --config {result.best_config})")
    if result.plot is not None:
        click.echo(f"best runs' curves: {result.plot}")
    click.echo(f"sweep directory: {result.sweep_dir}")
    if result.interrupted:
        click.echo(f"interrupted: continue with rayrl sweep --resume {result.sweep_dir}")
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(0 if best is not None else 1)


@main.command("show-config")
@config_option
@set_option
@click.option(
    "--doc",
    is_flag=True,
    help="Document every key: its docstring as # comment lines above it (the same text as "
    "the docs' configuration reference). Still a config that `rayrl train --config` reads.",
)
@_user_errors
def show_config(config: str | None, overrides: tuple[str, ...], doc: bool) -> None:
    """Print the resolved config as YAML (a file `rayrl train --config` takes); --doc adds
    each key's documentation as comments."""
    from rayrl.config import config_to_yaml
    from rayrl.presets import load_config

    resolved = load_config(config, overrides)
    if doc:
        from rayrl.config_reference import config_to_commented_yaml

        click.echo(config_to_commented_yaml(resolved), nl=False)
    else:
        click.echo(config_to_yaml(resolved), nl=False)


@main.command()
def presets() -> None:
    """List the config presets shipped with rayrl."""
    from rayrl.config import DEFAULT_PRESET, preset_names

    for name in preset_names():
        click.echo(name + ("  (default)" if name == DEFAULT_PRESET else ""))


@main.command()
@click.argument("path", metavar="RUN_DIR_OR_CHECKPOINT")
@click.option("--episodes", "-n", default=10, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--checkpoint",
    "which",
    type=click.Choice(["best", "latest"]),
    default="best",
    show_default=True,
    help="Which checkpoint of a run directory to load.",
)
@click.option(
    "--trust-env",
    is_flag=True,
    help="Allow a checkpoint whose env.id is 'module:EnvId' to import that module.",
)
@_user_errors
def evaluate(path: str, episodes: int, which: str, trust_env: bool) -> None:
    """Evaluate a run (its best checkpoint) or a checkpoint file with the run's evaluation
    protocol (its preset's evaluation epsilon, or sampled or greedy actions)."""
    from rayrl.api import evaluate as run_evaluation

    result = run_evaluation(path, episodes=episodes, which=which, trust_env=trust_env)
    returns = result.returns
    click.echo(
        f"{len(returns)} episodes: mean {returns.mean():.2f}  std {returns.std():.2f}  "
        f"min {returns.min():.2f}  max {returns.max():.2f}"
    )


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR [RUN_DIR ...]")
@click.option(
    "--output",
    "-o",
    default="learning_curves.png",
    show_default=True,
    help="Where to write the PNG.",
)
@_user_errors
def plot(run_dirs: tuple[str, ...], output: str) -> None:
    """Plot training and evaluation returns against env steps (several runs overlaid)."""
    from rayrl.plot import plot_runs

    click.echo(f"wrote {plot_runs(list(run_dirs), output)}")


if __name__ == "__main__":
    run(prog_name="rayrl")
