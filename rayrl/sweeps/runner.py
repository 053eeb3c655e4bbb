"""`rayrl sweep`: a sweep's trials as Ray Tune trials, from the checks before the first one
to the table after the last.

The sweep's directory (`<sweeps_dir>/<name>`) holds everything: `sweep.yaml` (the spec with
the command's `--set`, what `--resume` reads), `runs/<trial id>` (each trial's rayrl run
directory), `tune/` (Tune's experiment state, results and checkpoints), and at the end
`results.txt`, `best.yaml` and `best.png`.

Seeds are a grid of `run.seed` under every sampled setting (Tune's `constant_grid_search`
keeps a sampled setting the same across its seeds), so ASHA and PBT act on single runs and
the final table averages each setting over its seeds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import threading
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from rayrl.errors import UserError
from rayrl.files import atomic_path
from rayrl.host import check_supported
from rayrl.ray.connect import Connected, connect, disconnect
from rayrl.strict import to_plain
from rayrl.sweeps.progress import LiveTable
from rayrl.sweeps.resources import (
    check_fit,
    check_pbt_keeps_resources,
    cluster_capacity,
    largest_trial_cpus,
    trial_bundles,
)
from rayrl.sweeps.results import SweepResult, TrialOutcome, error_line, rank, write_outputs
from rayrl.sweeps.spec import Sweep, load_sweep
from rayrl.sweeps.trial import ENDED_FILE, run_trial

logger = logging.getLogger(__name__)

SPEC_FILE = "sweep.yaml"
TUNE_DIR = "tune"
RUNS_DIR = "runs"


def sweep(
    spec: str | Path | Mapping[str, Any] | None = None,
    overrides: Sequence[str] = (),
    *,
    resume: str | Path | None = None,
    address: str | None = None,
    table_interval_s: float = 15.0,
) -> SweepResult:
    """Run a sweep (a spec file or its mapping, with `overrides` on every trial's base
    config), or with `resume` continue the sweep in that directory: finished trials are
    kept, unfinished ones go on from their checkpoints. `address` joins a Ray cluster (None:
    $RAY_ADDRESS, else a local Ray sized to the machine). Everything is checked before the
    first trial starts; a refused new sweep leaves no directory."""
    check_supported()
    if resume is not None:
        if spec is not None or overrides:
            raise UserError("--resume continues a sweep with its saved spec; drop SPEC and --set")
        root = Path(resume).resolve()  # trials run in working directories of their own
        if not (root / SPEC_FILE).is_file() or not (root / TUNE_DIR).is_dir():
            raise UserError(f"'{root}' is not a rayrl sweep directory (no {SPEC_FILE} and tune/)")
        checked = load_sweep(root / SPEC_FILE, saved=True)
    else:
        if spec is None:
            raise UserError("a sweep needs a spec: rayrl sweep SPEC.yaml")
        checked = load_sweep(spec, overrides)
        check_pbt_keeps_resources(checked)
        root = new_directory(checked)
    try:
        return _run(checked, root, resume is not None, address, table_interval_s)
    except BaseException:
        if resume is None and not (root / TUNE_DIR).exists():
            shutil.rmtree(root, ignore_errors=True)  # refused before any trial: nothing left
        raise


def new_directory(checked: Sweep) -> Path:
    spec = checked.spec
    name = (
        spec.name or f"{Path(spec.base or 'default').stem}-sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    root = Path(spec.sweeps_dir) / name
    if root.exists():
        raise UserError(
            f"sweep directory '{root}' already exists; choose another name, or continue it "
            f"with rayrl sweep --resume {root}"
        )
    try:
        root.mkdir(parents=True)
    except OSError as error:
        raise UserError(
            f"sweeps_dir={spec.sweeps_dir!r}: cannot create the sweep's directory there "
            f"({error.strerror or error}); choose a directory this user can write to"
        ) from None
    saved = to_plain(spec)
    saved["set"] = list(checked.overrides)  # the spec's, then the command's
    with atomic_path(root / SPEC_FILE) as partial:  # what --resume reads: whole or absent
        partial.write_text(yaml.safe_dump(saved, sort_keys=False))
    return root.resolve()


def _run(
    checked: Sweep, root: Path, resuming: bool, address: str | None, table_interval_s: float
) -> SweepResult:
    import ray

    connected_here = Connected.ALREADY
    if not ray.is_initialized():
        # a local Ray holds at least the largest trial (its actors then share the cores)
        connected_here = connect(checked.base, address, cpus=largest_trial_cpus(checked))
    try:
        capacity = cluster_capacity(connected_here is Connected.STARTED_LOCAL)
        check_fit(checked, capacity)
        tuner = make_tuner(checked, root, resuming, table_interval_s)
        stop = Interrupts()
        with quiet_tune(), stop.installed():
            grid = tuner.fit()
        result = outcome(checked, root, grid, stop.requested)
        write_outputs(result, checked)
        return result
    finally:
        if connected_here:
            disconnect()


class Interrupts:
    """Ctrl-C, `kill` and `ray job stop` (SIGTERM) stop a sweep as Tune's own Ctrl-C does
    (the trials stopped, the sweep's state saved for `--resume`), and the sweep knows it was
    stopped: Tune tells no one. A second one exits at once. Installed from the main thread
    only (where Python runs signal handlers); elsewhere Tune's own handling stays."""

    def __init__(self) -> None:
        self.requested = False

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        if not callable(signal.getsignal(signal.SIGUSR1)):  # Tune is not running yet
            raise KeyboardInterrupt
        self.requested = True
        logger.warning(
            "interrupted: stopping the trials and saving the sweep's state (interrupt again "
            "to exit at once)"
        )
        os.kill(os.getpid(), signal.SIGUSR1)  # Tune's graceful stop

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # SIGINT is this class's
        for signum in previous:
            signal.signal(signum, self._on_signal)
        try:
            yield
        finally:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@contextlib.contextmanager
def quiet_tune() -> Iterator[None]:
    """Tune's own console output off while a sweep runs (the live table says what a user
    needs, and a failed trial's one line names its error file): its progress reporter, its
    log lines (a failed trial's whole traceback among them) and its advice warnings."""
    settings = {
        "RAY_AIR_NEW_OUTPUT": "0",  # the reporter that verbose=0 silences
        "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    }
    saved = {key: os.environ.get(key) for key in settings}
    tune_logger = logging.getLogger("ray.tune")
    level = tune_logger.level
    os.environ.update(settings)
    tune_logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning, module="ray")
            yield
    finally:
        tune_logger.setLevel(level)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def make_tuner(checked: Sweep, root: Path, resuming: bool, table_interval_s: float) -> Any:
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    capacity = cluster_capacity()

    def resources(settings: dict[str, Any]) -> tune.PlacementGroupFactory:
        bundles = trial_bundles(checked.config_with(settings), capacity)
        return tune.PlacementGroupFactory([dict(bundle) for bundle in bundles])

    trainable = tune.with_resources(
        tune.with_parameters(run_trial, sweep=checked, runs_dir=str(root / RUNS_DIR)),
        resources=resources,
    )
    if resuming:
        return tune.Tuner.restore(str(root / TUNE_DIR), trainable, resume_unfinished=True)
    spec = checked.spec
    space = {domain.key: domain.tune() for domain in checked.domains}
    space["run.seed"] = tune.grid_search(list(spec.seeds))
    keys = [*space]
    return tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(
            metric=spec.metric,
            mode=spec.mode,
            num_samples=spec.num_trials,
            scheduler=make_scheduler(checked),
            search_alg=BasicVariantGenerator(
                constant_grid_search=True,
                random_state=spec.search_seed,
                max_concurrent=spec.max_concurrent or 0,  # (Tune's own limit skips this one)
            ),
            trial_name_creator=lambda trial: trial.trial_id,
            trial_dirname_creator=lambda trial: trial.trial_id,
        ),
        run_config=tune.RunConfig(
            name=TUNE_DIR,
            storage_path=str(root),
            verbose=0,
            callbacks=[LiveTable(keys, spec.metric, table_interval_s)],
            failure_config=tune.FailureConfig(max_failures=0),
            # PBT copies a trial's newest checkpoint into another, which restores it a
            # while later: a rotation can delete it first; other schedulers resume their
            # own trials only, from their newest
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=None if spec.scheduler.name == "pbt" else 2
            ),
        ),
    )


def make_scheduler(checked: Sweep) -> Any:
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from rayrl.compat.tune_internals import pbt_scheduler

    scheduler = checked.spec.scheduler
    if scheduler.name == "asha":
        return ASHAScheduler(
            time_attr="env_steps",
            # rungs end two evaluations before the budget, so that no rung falls on a run's
            # final evaluation (a stop there would cut its final checkpoint), and a trial
            # that gets past them ends itself
            max_t=checked.last_rung_env_steps(),
            grace_period=checked.grace_env_steps(),
            reduction_factor=scheduler.reduction_factor,
            stop_last_trials=False,
        )
    if scheduler.name == "pbt":
        return pbt_scheduler(
            time_attr="env_steps",
            perturbation_interval=checked.perturbation_interval(),
            # a choice as a list: PBT moves it to a neighbouring value (a Tune domain would
            # be scaled like a number); ranges are scaled, then kept within them
            hyperparam_mutations={
                d.key: list(d.values) if d.kind == "choice" else d.tune() for d in checked.domains
            },
            quantile_fraction=scheduler.quantile_fraction,
            resample_probability=scheduler.resample_probability,
            synch=scheduler.synch,
            custom_explore_fn=checked.within_ranges,
        )
    return FIFOScheduler()


def outcome(checked: Sweep, root: Path, grid: Any, interrupted: bool) -> SweepResult:
    """Each trial's outcome, from Tune's results and whether the run of each ended by itself
    (`ENDED_FILE`): a trial with an error failed; one whose run ended by itself finished;
    of the others, Tune stopped each early (its scheduler did) unless the sweep was
    interrupted or the trial never reported, which leaves them unfinished (`--resume` goes
    on with them)."""
    trials = []
    for result in grid:
        trial_id = Path(result.path).name
        metrics = result.metrics or {}
        if result.error is not None:
            state = "failed"
        elif (root / RUNS_DIR / trial_id / ENDED_FILE).is_file():
            state = "finished"
        elif interrupted or not metrics:  # (one that never reported never ran)
            state = "unfinished"
        else:
            state = "stopped early"
        value = metrics.get(checked.spec.metric)
        trials.append(
            TrialOutcome(
                trial_id=trial_id,
                settings={k: v for k, v in result.config.items()},
                value=None if value is None else float(value),
                env_steps=int(metrics.get("env_steps", 0)),
                status=state,
                error=error_line(result.error) if result.error is not None else None,
                run_dir=root / RUNS_DIR / trial_id,
            )
        )
    trials.sort(key=lambda t: t.trial_id)
    return SweepResult(
        sweep_dir=root,
        trials=trials,
        ranked=rank(trials, checked.spec.mode),
        metric=checked.spec.metric,
        interrupted=interrupted,
    )
