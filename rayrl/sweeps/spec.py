"""A sweep's spec (`rayrl sweep SPEC.yaml`): the base config, the search space, the metric,
the trials, the seeds and the scheduler, checked whole before any trial starts.

    name: cartpole-ppo-lr              # the sweep's directory under sweeps_dir
    base: cartpole_ppo                 # a preset, or a YAML path (relative to this file)
    set: [run.runtime=local]           # overrides of the base, as with `rayrl train --set`
    space:                             # any config key; one domain each
      learner.lr: {loguniform: [3e-4, 3e-3]}
      algorithm.entropy_coef: {choice: [0.0, 0.01]}
      workers.envs_per_worker: {grid: [4, 8]}   # every value, for every sampled setting
      algorithm.clip_coef: {uniform: [0.1, 0.3]}
      algorithm.epochs: {randint: [5, 20]}      # integers, both ends included
    num_trials: 4                      # sampled settings (times the grid's combinations)
    seeds: [0, 1]                      # each setting runs once per seed
    metric: eval/return_mean
    mode: max
    scheduler: {name: asha, grace_env_steps: 20000, reduction_factor: 3}

Every key and value goes through the same checks as `rayrl train`'s config: a space's every
choice, and each end of its ranges, is applied to the base config and validated.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from rayrl.api import validate
from rayrl.config import Config, read_source
from rayrl.errors import ConfigError, UserError, did_you_mean
from rayrl.presets import family_name, load_config, with_overrides
from rayrl.renamed_keys import new_keys
from rayrl.strict import bounded, build, checked

DOMAINS = ("choice", "grid", "uniform", "loguniform", "randint")
"""The forms of a search-space entry: `{choice: [values]}`, `{grid: [values]}` (every value,
for every sampled setting), `{uniform: [low, high]}`, `{loguniform: [low, high]}` and
`{randint: [low, high]}` (integers, both ends included)."""

SWEEP_KEYS = ("run.seed", "run.name", "run.runs_dir")
"""Config keys the sweep sets for each trial itself (`seeds`, the trial's run directory)."""

EVAL_METRICS = (
    "eval/return_mean",
    "eval/return_std",
    "eval/return_min",
    "eval/return_max",
    "eval/length_mean",
)
"""What a trial reports at each evaluation, and so what a sweep can optimize."""


def _plain_name(value: str) -> str | None:
    if value and "/" not in value and value not in (".", ".."):
        return None
    return "is not a plain directory name; valid: a name without '/'"


@dataclass(frozen=True)
class SchedulerSpec:
    """How trials are stopped early or perturbed; their clock is env steps."""

    name: Literal["none", "asha", "pbt"] = "none"
    """"none": every trial runs its budget; "asha": asynchronous successive halving stops
    the worse trials at rungs of env steps; "pbt": population-based training copies the
    better trials' checkpoints into the worse ones and perturbs their settings."""
    grace_env_steps: int | None = bounded(None, ge=1)
    """ASHA: env steps before a trial can be stopped (the first rung); None: a ninth of
    run.total_env_steps (with the default reduction factor, a second rung at a third; no
    rung is within two evaluations of the end)."""
    reduction_factor: float = bounded(3.0, gt=1.0)
    """ASHA: a rung keeps 1 in this many trials; the next rung is this many times later."""
    perturbation_interval_env_steps: int | None = bounded(None, ge=1)
    """PBT: env steps between perturbations of a trial; None: five evaluation intervals."""
    quantile_fraction: float = bounded(0.25, gt=0.0, le=0.5)
    """PBT: the fraction of trials that copy (the worst) and that are copied (the best)."""
    resample_probability: float = bounded(0.25, ge=0.0, le=1.0)
    """PBT: how often a perturbed value is drawn anew from its domain rather than scaled."""
    synch: bool = False
    """PBT: perturb the trials together. Each trial pauses at a perturbation until every
    other reaches it (or has ended), so which trial copies which never depends on which
    one started or ran faster; each pause costs a trial's restart from its checkpoint.
    False (Ray's asynchronous PBT): a reporting trial's new score is compared with the
    others' older ones, so with few trials the one reporting tends to look the better, and
    a copy may never happen."""


@dataclass(frozen=True)
class SweepSpec:
    """A whole sweep. `base` and `set` make the base config; `space` varies it."""

    name: str | None = checked(None, _plain_name)
    """The sweep's directory under `sweeps_dir`; None: `<base>-sweep-<time>`."""
    sweeps_dir: str = "sweeps"
    """Where sweeps' directories go (a relative path is from the working directory)."""
    base: str | None = None
    """A preset name or a YAML config (a relative path is from the spec's directory); None:
    the default preset."""
    set: tuple[str, ...] = ()
    """`dotted.key=value` overrides of the base config (before the command's `--set`)."""
    space: dict[str, Any] = field(default_factory=dict)
    """Config key -> domain (see `DOMAINS`)."""
    metric: str = "eval/return_mean"
    """What trials are ranked by: one of `EVAL_METRICS`."""
    mode: Literal["max", "min"] = "max"
    num_trials: int = bounded(1, ge=1)
    """Settings sampled from the space (each run once per seed and grid combination)."""
    seeds: tuple[int, ...] = bounded((0,), ge=0)
    """Each setting runs once per seed; the table aggregates over them."""
    search_seed: int | None = bounded(None, ge=0)
    """The seed of the settings' draws: the same settings each time (None: new ones)."""
    max_concurrent: int | None = bounded(None, ge=1)
    """Trials running at once; None: as many as the machine or cluster fits."""
    scheduler: SchedulerSpec = field(default_factory=SchedulerSpec)


@dataclass(frozen=True)
class Domain:
    """One entry of the search space."""

    key: str
    kind: str
    values: tuple[Any, ...]
    """The choices (choice, grid) or the two ends (uniform, loguniform, randint): what
    stands for the whole domain in the checks."""

    def tune(self) -> Any:
        """The Ray Tune domain."""
        from ray import tune

        if self.kind == "choice":
            return tune.choice(list(self.values))
        if self.kind == "grid":
            return tune.grid_search(list(self.values))
        low, high = self.values
        if self.kind == "uniform":
            return tune.uniform(low, high)
        if self.kind == "loguniform":
            return tune.loguniform(low, high)
        return tune.randint(low, high + 1)  # Tune's high is excluded


def parse_domain(key: str, entry: Any) -> Domain:
    """A `space` entry, checked for its form (not yet against the config)."""
    where = f"space.{key}"
    forms = ", ".join(f"{{{kind}: [...]}}" for kind in DOMAINS)
    if not isinstance(entry, Mapping) or len(entry) != 1:
        raise ConfigError(f"{where}={entry!r} is not a domain; valid: one of {forms}")
    kind, values = next(iter(entry.items()))
    if kind not in DOMAINS:
        raise ConfigError(
            f"{where}: unknown domain '{kind}'{did_you_mean(str(kind), DOMAINS)}; valid: {forms}"
        )
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
        raise ConfigError(f"{where}.{kind}={values!r} is not valid; expected a non-empty list")
    if kind in ("choice", "grid"):
        return Domain(key, kind, tuple(values))
    if len(values) != 2 or not all(_is_number(v) for v in values):
        raise ConfigError(f"{where}.{kind}={values!r} is not valid; expected [low, high] numbers")
    low, high = (float(v) for v in values)
    if kind == "randint":
        if low != int(low) or high != int(high):
            raise ConfigError(f"{where}.randint={values!r} is not valid; expected integers")
        low, high = int(low), int(high)
    if not low < high:
        raise ConfigError(f"{where}.{kind}={values!r} is not valid; expected low < high")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{where}.loguniform={values!r} is not valid; expected 0 < low < high")
    return Domain(key, kind, (low, high))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def override(key: str, value: Any) -> str:
    """The `--set` form of a setting: overrides are parsed as YAML, and JSON is YAML; a string
    that YAML reads back as itself stays bare (`env.id=CartPole-v1`)."""
    if isinstance(value, str):
        try:
            if yaml.safe_load(value) == value:
                return f"{key}={value}"
        except yaml.YAMLError:
            pass
    return f"{key}={json.dumps(value)}"


@dataclass(frozen=True)
class Sweep:
    """A checked spec: its base config and its search space, ready to run."""

    spec: SweepSpec
    base: Config
    """The base config with the spec's and the command's overrides."""
    overrides: tuple[str, ...]
    """What makes `base` from the base preset or file: the spec's `set`, then the command's."""
    domains: tuple[Domain, ...]

    def config_with(self, settings: Mapping[str, Any]) -> Config:
        """The base config with a trial's settings (space keys and `run.seed`; Tune restores
        a resumed sweep's under the names they had, so renamed keys go to their new ones)."""
        family = family_name(self.base.algorithm.name)
        overrides = [
            override(new, value) for key, value in settings.items() for new in new_keys(key, family)
        ]
        return with_overrides(self.base, overrides)

    def within_ranges(self, settings: dict[str, Any]) -> dict[str, Any]:
        """`settings` with each value of a range domain clipped into its range (integers for
        randint): PBT perturbs by scaling (x0.8, x1.2), which can leave a range, and the
        config's bounds, after the checks before the sweep."""
        clipped = dict(settings)
        for domain in self.domains:
            if domain.kind in ("uniform", "loguniform", "randint") and domain.key in clipped:
                low, high = domain.values
                value = min(max(clipped[domain.key], low), high)
                clipped[domain.key] = round(value) if domain.kind == "randint" else value
        return clipped

    @property
    def eval_interval(self) -> int:
        return self.base.run.eval_interval_env_steps

    def last_rung_env_steps(self) -> int:
        """ASHA's last rung: two evaluations before the budget (see `make_scheduler`)."""
        return self.base.run.total_env_steps - 2 * self.eval_interval

    def grace_env_steps(self) -> int:
        scheduler = self.spec.scheduler
        if scheduler.grace_env_steps is not None:
            return scheduler.grace_env_steps
        rungs = round(scheduler.reduction_factor**2)
        return max(self.eval_interval, self.base.run.total_env_steps // rungs)

    def perturbation_interval(self) -> int:
        interval = self.spec.scheduler.perturbation_interval_env_steps
        return 5 * self.eval_interval if interval is None else interval


def shipped_specs() -> dict[str, Path]:
    """The example specs shipped in `rayrl/sweeps/specs`, by name."""
    folder = Path(__file__).parent / "specs"
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}


def spec_path(source: str | Path) -> Path:
    """A spec file's path, or the path of a shipped spec named `source`."""
    path = Path(source)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"sweep spec '{path}' does not exist")
        return path
    shipped = shipped_specs()
    if str(source) not in shipped:
        raise ConfigError(
            f"unknown sweep spec '{source}'{did_you_mean(str(source), shipped)}; shipped: "
            f"{', '.join(shipped)}; or pass a path to a .yaml file"
        )
    return shipped[str(source)]


def read_spec(source: str | Path) -> dict[str, Any]:
    """The raw mapping of a spec file (or a shipped spec's name)."""
    path = spec_path(source)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ConfigError(f"sweep spec '{path}' is not valid YAML: {error}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"sweep spec '{path}': expected a mapping of keys, got {data!r}")
    return dict(data)


def load_sweep(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = (), *, saved: bool = False
) -> Sweep:
    """A spec file (or its mapping) checked whole, with the command's `--set` on its base;
    `saved`: the spec a sweep saved, to resume it (with renamed keys under their new names,
    where a new spec's are refused)."""
    if isinstance(source, Mapping):
        data, folder = dict(source), Path.cwd()
    else:
        data, folder = read_spec(source), spec_path(source).resolve().parent
    if saved:
        data = under_new_names(data)
    spec: SweepSpec = build(SweepSpec, data, "")
    if spec.base is not None and Path(spec.base).suffix in (".yaml", ".yml"):
        spec = replace(spec, base=str((folder / spec.base).resolve()))
    return check_sweep(spec, overrides)


def under_new_names(data: dict[str, Any]) -> dict[str, Any]:
    """A saved spec's `set` and `space` with the config keys renamed since it was saved
    under their new names (`rayrl.renamed_keys`)."""
    overrides = [str(entry) for entry in data.get("set") or ()]
    named = [entry.split("=", 1)[1] for entry in overrides if entry.startswith("algorithm.name=")]
    if named:
        algorithm = yaml.safe_load(named[-1])
    else:
        algorithm = (read_source(data.get("base")).get("algorithm") or {}).get("name")
    family = family_name(algorithm)
    renamed_set = []
    for entry in overrides:
        key, equals, value = entry.partition("=")
        renamed_set += [f"{new}{equals}{value}" for new in new_keys(key, family)]
    space = data.get("space") or {}
    renamed_space = {new: domain for key, domain in space.items() for new in new_keys(key, family)}
    return {**data, "set": renamed_set, "space": renamed_space}


def check_sweep(spec: SweepSpec, overrides: Sequence[str] = ()) -> Sweep:
    """Check everything a sweep can be checked for before any trial starts."""
    all_overrides = (*spec.set, *overrides)
    base = load_config(spec.base, all_overrides)
    validate(base)
    if spec.scheduler.name == "pbt":
        # what PBT copies from trial to trial: a checkpoint with every report (evaluation)
        every_evaluation = override(
            "run.checkpoint_interval_env_steps", base.run.eval_interval_env_steps
        )
        all_overrides = (*all_overrides, every_evaluation)
        base = with_overrides(base, [every_evaluation])
    domains = tuple(parse_domain(key, entry) for key, entry in spec.space.items())
    for domain in domains:
        if domain.key in SWEEP_KEYS:
            raise ConfigError(
                f"space.{domain.key}: the sweep sets {', '.join(SWEEP_KEYS)} for each trial "
                "itself (vary the seed with `seeds`)"
            )
        for value in domain.values:
            try:
                validate(with_overrides(base, [override(domain.key, value)]))
            except UserError as error:
                raise ConfigError(f"space.{domain.key}: {error}") from None
    if spec.metric not in EVAL_METRICS:
        raise ConfigError(
            f"metric={spec.metric!r} is not reported by trials"
            f"{did_you_mean(spec.metric, EVAL_METRICS)}; valid: {', '.join(EVAL_METRICS)}"
        )
    if len(set(spec.seeds)) != len(spec.seeds):
        raise ConfigError(f"seeds={list(spec.seeds)!r} repeats a seed; valid: distinct seeds")
    sweep = Sweep(spec, base, all_overrides, domains)
    check_scheduler(sweep)
    return sweep


def check_scheduler(sweep: Sweep) -> None:
    scheduler, run = sweep.spec.scheduler, sweep.base.run
    if scheduler.name == "asha" and sweep.grace_env_steps() >= sweep.last_rung_env_steps():
        raise ConfigError(
            f"scheduler.grace_env_steps={sweep.grace_env_steps()} is not below "
            f"run.total_env_steps={run.total_env_steps} less two evaluation intervals: ASHA "
            "could never stop a trial before its final evaluations; lower it"
        )
    if scheduler.name != "pbt":
        return
    if not sweep.domains:
        raise ConfigError("scheduler.name='pbt' needs a space to perturb; the space is empty")
    grids = [d.key for d in sweep.domains if d.kind == "grid"]
    if grids:
        raise ConfigError(
            f"space.{grids[0]}: a grid cannot be perturbed; with scheduler.name='pbt' use "
            "choice, uniform, loguniform or randint"
        )
    if sweep.perturbation_interval() < sweep.eval_interval:
        raise ConfigError(
            "scheduler.perturbation_interval_env_steps="
            f"{sweep.perturbation_interval()} is below run.eval_interval_env_steps="
            f"{sweep.eval_interval}: trials report (and are perturbed) at evaluations; "
            "raise it"
        )
