"""Typed run configuration: one frozen dataclass per concern, loaded strictly from YAML.

A run is described by a `Config`: presets ship in `rayrl/configs/*.yaml`, a user file or
preset name is loaded with `load_config`, and `--set dotted.key=value` overrides (values
parsed as YAML) are applied before validation. Validation is strict and happens before
anything starts: an unknown key gets a "did you mean", a wrong type or an out-of-range value
names the dotted key, the value and what is valid.

The schema machinery (`build`) is written here rather than taken from a library because it
is small, and the libraries that do this (pydantic, omegaconf) either do not name the dotted
key and the valid range in one line, or bring a second way to declare fields.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from rayrl.errors import ConfigError, did_you_mean


def bounded(
    default: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field whose numeric value is range-checked when the config is built."""
    return field(default=default, metadata={"bounds": (gt, ge, le, lt)})


@dataclass(frozen=True)
class EnvConfig:
    """Which environment to train on, and how it is preprocessed."""

    id: str = "CartPole-v1"
    """Gymnasium id. `ALE/<Game>-v5` ids run in ale-py's C++ vector env with the DeepMind
    preprocessing below; any other id runs in a gymnasium synchronous vector env."""
    max_episode_steps: int | None = bounded(None, gt=0)
    """Truncate episodes after this many agent steps; None keeps the env's own limit
    (Atari: 108,000 frames, i.e. 27,000 steps with frame skip 4)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for `gymnasium.make` (non-Atari envs)."""
    eval_id: str | None = None
    """Evaluate on this env id instead of `id` (same observation and action spaces)."""
    frame_stack: int = bounded(4, ge=1)
    """Atari: number of 84x84 grayscale frames stacked into one observation."""
    frame_skip: int = bounded(4, ge=1)
    """Atari: emulator frames per agent step (the last two are max-pooled)."""
    noop_max: int = bounded(30, ge=0)
    """Atari: up to this many no-op actions after each reset."""
    repeat_action_probability: float = bounded(0.0, ge=0.0, le=1.0)
    """Atari: sticky actions; 0 is the DeepMind (Nature DQN) setting."""
    fire_reset: bool = True
    """Atari: press FIRE after reset in games that need it to start."""
    terminal_on_life_loss: bool = False
    """Training only: a lost life ends the bootstrap (episodic life). The game itself goes on,
    and episode returns and evaluation always count whole games."""
    clip_rewards: bool = False
    """Training only: learn from sign(reward). Returns are always reported unclipped."""


@dataclass(frozen=True)
class AlgorithmConfig:
    """Base of every algorithm's config; `name` picks the algorithm (see rayrl.algorithms)."""

    name: str = "dqn"
    """Algorithm name, a key of `rayrl.algorithms.ALGORITHMS`."""


@dataclass(frozen=True)
class ReplayConfig:
    """The replay buffer and the rate at which it is sampled."""

    capacity: int = bounded(100_000, ge=1)
    """Most transitions held; the oldest are dropped first."""
    min_size: int = bounded(1_000, ge=1)
    """Transitions stored before the first sample (warm-up)."""
    samples_per_insert: float | None = bounded(8.0, gt=0.0)
    """Replay ratio: transitions sampled for training per transition inserted, enforced both
    ways (learning waits for data, sampling waits for learning). Training every N env steps
    with K updates of batch B is samples_per_insert = K*B/N. None lets both run free."""
    prioritized: bool = False
    """Prioritized replay (proportional, sum tree) instead of uniform."""
    priority_alpha: float = bounded(0.6, ge=0.0, le=1.0)
    """How strongly priorities skew sampling (0 is uniform)."""
    priority_beta_start: float = bounded(0.4, ge=0.0, le=1.0)
    """Importance-sampling exponent at the first update."""
    priority_beta_end: float = bounded(1.0, ge=0.0, le=1.0)
    """Importance-sampling exponent reached after `priority_beta_anneal_updates`."""
    priority_beta_anneal_updates: int = bounded(100_000, ge=1)
    """Learner updates over which beta moves linearly from start to end."""
    priority_epsilon: float = bounded(1e-6, gt=0.0)
    """Added to |TD error| so that no transition gets zero priority."""
    save_with_checkpoint: bool = False
    """Write the buffer's contents beside each checkpoint so a resumed run need not refill it
    (large for Atari: about 7 KB per transition)."""


@dataclass(frozen=True)
class WorkersConfig:
    """Rollout workers: each hosts a vector env and a CPU copy of the policy."""

    num_workers: int = bounded(2, ge=1)
    """Rollout workers (Ray actors; stepped in turn by the local runtime)."""
    envs_per_worker: int = bounded(4, ge=1)
    """Environments in each worker's vector env."""
    cpus_per_worker: float = bounded(1.0, gt=0.0)
    """CPUs each worker asks Ray for."""
    steps_per_chunk: int = bounded(32, ge=1)
    """Vector-env steps per chunk; a chunk holds envs_per_worker * steps_per_chunk steps.
    (IMPALA's chunk is one unroll per env: `algorithm.num_steps` steps.)"""
    max_chunks_in_flight: int = bounded(2, ge=1)
    """Chunks a worker may have requested but not yet delivered to replay (backpressure)."""
    sample_timeout_s: float = bounded(300.0, gt=0.0)
    """A chunk not delivered within this time marks its worker as hung: it is killed and
    replaced."""
    env_threads: int = bounded(0, ge=0)
    """Atari: emulator threads per worker; 0 uses one per CPU the worker asks for."""


@dataclass(frozen=True)
class LearnerConfig:
    """The learner: optimization steps and weight publication."""

    batch_size: int = bounded(64, ge=1)
    """Transitions (DQN) or unrolls (IMPALA) per update."""
    lr: float = bounded(1e-3, gt=0.0)
    """Learning rate."""
    optimizer_eps: float = bounded(1e-8, gt=0.0)
    """Adam's (or RMSprop's) epsilon."""
    max_grad_norm: float | None = bounded(10.0, gt=0.0)
    """Clip the global gradient norm to this value; None disables clipping."""
    sync_interval: int = bounded(20, ge=1)
    """Publish new weights to the workers every this many updates."""
    device: str = "auto"
    """Torch device: "auto" (CUDA when torch sees one, else CPU), "cpu", "cuda" or "cuda:N"."""
    num_gpus: float | None = bounded(None, ge=0.0)
    """GPUs the learner actor asks Ray for (fractions allowed); None asks for one when the
    cluster has a GPU and none otherwise."""
    num_threads: int = bounded(1, ge=1)
    """Torch CPU threads in the learner process."""
    batches_per_request: int = bounded(8, ge=1)
    """Ray runtime: batches the learner fetches from the replay actor per request; more
    amortizes the cost of an actor call (~1 ms) over small, fast updates."""
    prefetch_requests: int = bounded(2, ge=2)
    """Ray runtime: sample requests the learner keeps in flight, so that it never waits for
    the replay actor to answer."""


@dataclass(frozen=True)
class RunConfig:
    """How long to train, when to evaluate and save, and where."""

    runtime: Literal["ray", "local"] = "ray"
    """"ray": workers, replay and learner as Ray actors; "local": everything in one process."""
    seed: int = bounded(0, ge=0)
    """Seed for networks, exploration and environments."""
    total_env_steps: int = bounded(500_000, ge=1)
    """Stop after this many environment steps (agent steps, summed over all envs)."""
    time_budget_s: float | None = bounded(None, gt=0.0)
    """Stop after this much wall-clock time; None means no limit."""
    target_return: float | None = None
    """Stop as soon as an evaluation's mean return reaches this value; None means never."""
    eval_interval_env_steps: int = bounded(10_000, ge=1)
    """Evaluate the greedy policy every this many env steps."""
    eval_episodes: int = bounded(10, ge=1)
    """Episodes per evaluation."""
    eval_timeout_s: float = bounded(900.0, gt=0.0)
    """Ray runtime: an evaluation that takes longer than this is abandoned and its actor
    replaced (a hung env must not silently stop evaluation)."""
    checkpoint_interval_env_steps: int = bounded(50_000, ge=1)
    """Save a checkpoint every this many env steps (and at the end of the run)."""
    keep_checkpoints: int = bounded(3, ge=1)
    """Periodic checkpoints kept on disk (the `best` and `latest` ones are kept as well)."""
    init_checkpoint: str | None = None
    """Start a new run's network from this checkpoint's weights (a warm start: fresh
    optimizer and counters; `--resume` continues a run instead)."""
    runs_dir: str = "runs"
    """Directory under which each run gets its own directory."""
    name: str | None = None
    """Run directory name; None makes one from the env, the algorithm and the start time."""


@dataclass(frozen=True)
class WandbConfig:
    """Weights & Biases. Only the driver talks to W&B."""

    enabled: bool = False
    """Log the run to W&B."""
    project: str = "rayrl"
    """W&B project."""
    entity: str | None = None
    """W&B entity (user or team); None uses the default of the API key."""
    group: str | None = None
    """W&B group, e.g. one per sweep."""
    name: str | None = None
    """W&B run name; None uses the run directory's name."""
    tags: tuple[str, ...] = ()
    """W&B tags."""
    mode: Literal["auto", "online", "offline"] = "auto"
    """"auto" is online when an API key is configured and offline otherwise; the WANDB_MODE
    environment variable overrides it."""
    log_best_checkpoint: bool = False
    """At the end of the run, upload `best.pt` as a W&B model artifact (`<run>-best`)."""


@dataclass(frozen=True)
class LoggingConfig:
    """Where metrics go. A JSONL file in the run directory is always written."""

    console: bool = True
    """A live progress bar and an end-of-run summary on the terminal."""
    log_interval_s: float = bounded(2.0, gt=0.0)
    """Aggregate training metrics and write them this often."""
    tensorboard: bool = False
    """Also write TensorBoard event files into the run directory (needs `tensorboard`)."""
    wandb: WandbConfig = field(default_factory=WandbConfig)
    """Weights & Biases settings."""
    video_interval_evals: int | None = bounded(None, ge=1)
    """Record one greedy episode as a video every this many evaluations (the first
    evaluation included): saved under the run's `videos/` and uploaded to W&B when it is
    enabled. None (the default) records none; videos need `pip install 'rayrl[video]'`."""


@dataclass(frozen=True)
class Config:
    """A whole run. Every field has a default; presets override some."""

    env: EnvConfig = field(default_factory=EnvConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    run: RunConfig = field(default_factory=RunConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    @property
    def chunk_size(self) -> int:
        """Environment steps in one worker chunk."""
        return self.workers.envs_per_worker * self.workers.steps_per_chunk

    @property
    def total_envs(self) -> int:
        """Training environments over all workers."""
        return self.workers.num_workers * self.workers.envs_per_worker


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------

DEFAULT_PRESET = "cartpole_dqn"


def preset_names() -> list[str]:
    """Names of the presets shipped in `rayrl/configs`."""
    folder = resources.files("rayrl") / "configs"
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def read_source(source: str | Path | None) -> dict[str, Any]:
    """The raw mapping of a preset name or YAML path (None: the default preset)."""
    source = DEFAULT_PRESET if source is None else source
    text_path = Path(source)
    if isinstance(source, Path) or text_path.suffix in (".yaml", ".yml") or text_path.exists():
        if not text_path.is_file():
            raise ConfigError(f"config file '{source}' does not exist")
        text = text_path.read_text()
    else:
        names = preset_names()
        if source not in names:
            raise ConfigError(
                f"unknown preset '{source}'{did_you_mean(str(source), names)}; "
                f"presets: {', '.join(names)}; or pass a path to a .yaml file"
            )
        text = (resources.files("rayrl") / "configs" / f"{source}.yaml").read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config '{source}' is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config '{source}' must be a mapping of sections, got {data!r}")
    return data


def apply_override(data: dict[str, Any], override: str) -> None:
    """Apply one `dotted.key=value` override (value parsed as YAML) to a raw config mapping."""
    key, sep, raw_value = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override '{override}' must look like dotted.key=value")
    try:
        value = yaml.safe_load(raw_value) if raw_value.strip() else None
    except yaml.YAMLError:
        value = raw_value
    node = data
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            prefix = ".".join(parts[: i + 1])
            raise ConfigError(f"override '{override}': '{prefix}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def load_config(source: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Load a preset name or YAML file (None: the default preset), apply overrides, validate."""
    data = read_source(source)
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(data)


def with_overrides(config: Config, overrides: Sequence[str]) -> Config:
    """A copy of `config` with `dotted.key=value` overrides applied and validated."""
    data = config_to_dict(config)
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(data)


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """Build and validate a `Config` from a plain mapping (YAML-shaped)."""
    config = build(Config, data, "")
    check_consistency(config)
    return config


def config_to_dict(config: Any) -> dict[str, Any]:
    """A dataclass config as plain YAML/JSON-safe values (tuples become lists)."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        return value

    return plain(config)


def config_to_yaml(config: Config) -> str:
    """The resolved config as YAML, in schema order."""
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


def check_consistency(config: Config) -> None:
    """Checks that involve more than one field."""
    if config.replay.min_size > config.replay.capacity:
        raise ConfigError(
            f"replay.min_size={config.replay.min_size} is larger than "
            f"replay.capacity={config.replay.capacity}; it must be at most the capacity"
        )
    algorithm_check = getattr(config.algorithm, "check", None)
    if algorithm_check is not None:
        algorithm_check(config)


# --------------------------------------------------------------------------------------------
# The strict builder
# --------------------------------------------------------------------------------------------


def build(cls: type, data: Any, path: str) -> Any:
    """Build dataclass `cls` from `data`, checking keys, types and bounds; `path` is dotted."""
    where = path or "the config"
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of keys, got {data!r}")
    if cls is AlgorithmConfig or (isinstance(cls, type) and issubclass(cls, AlgorithmConfig)):
        cls = algorithm_config_class(data.get("name", AlgorithmConfig.name), path)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if key not in fields:
            dotted = f"{path}.{key}" if path else str(key)
            raise ConfigError(
                f"unknown key '{dotted}'{did_you_mean(str(key), fields)}; "
                f"valid keys in {where}: {', '.join(fields)}"
            )
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            continue
        dotted = f"{path}.{name}" if path else name
        value = coerce(hints[name], data[name], dotted)
        check_bounds(f, value, dotted)
        kwargs[name] = value
    return cls(**kwargs)


def algorithm_config_class(name: Any, path: str) -> type:
    """The config dataclass of algorithm `name` (imported lazily: algorithms import torch)."""
    from rayrl.algorithms import ALGORITHMS

    if name not in ALGORITHMS:
        raise ConfigError(
            f"{path}.name: unknown algorithm {name!r}{did_you_mean(str(name), ALGORITHMS)}; "
            f"valid: {', '.join(ALGORITHMS)}"
        )
    return ALGORITHMS[name].config_class


def check_bounds(f: dataclasses.Field, value: Any, dotted: str) -> None:
    """Raise if a bounded numeric field is out of range."""
    bounds = f.metadata.get("bounds")
    if bounds is None or value is None:
        return
    gt, ge, le, lt = bounds
    checks = [
        (gt, lambda v, b: v > b, "> {}"),
        (ge, lambda v, b: v >= b, ">= {}"),
        (le, lambda v, b: v <= b, "<= {}"),
        (lt, lambda v, b: v < b, "< {}"),
    ]
    valid = [text.format(bound) for bound, _, text in checks if bound is not None]
    for bound, ok, _ in checks:
        if bound is not None and not ok(value, bound):
            raise ConfigError(f"{dotted}={value!r} is out of range; valid: {' and '.join(valid)}")


def describe(tp: Any) -> str:
    """A short human description of a type annotation."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin in (tuple, list):
        return f"a list of {describe(typing.get_args(tp)[0])}"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(tp):
        return "a mapping of keys"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, str(tp)
    )


def coerce(tp: Any, value: Any, dotted: str) -> Any:
    """Check `value` against annotation `tp` and return it in canonical form."""
    origin = typing.get_origin(tp)
    bad = ConfigError(f"{dotted}={value!r} is not valid; expected {describe(tp)}")
    if dataclasses.is_dataclass(tp):
        return build(tp, value, dotted)
    if origin in (typing.Union, types.UnionType):
        arms = typing.get_args(tp)
        if value is None:
            if type(None) in arms:
                return None
            raise bad
        for arm in arms:
            if arm is type(None):
                continue
            try:
                return coerce(arm, value, dotted)
            except ConfigError:
                continue
        raise bad
    if origin is Literal:
        if value in typing.get_args(tp):
            return value
        raise bad
    if origin in (tuple, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise bad
        element = typing.get_args(tp)[0]
        return tuple(coerce(element, v, f"{dotted}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise bad
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        number = as_number(value)
        if number is None or not math.isfinite(number) or float(number) != int(number):
            raise bad
        return int(number)
    if tp is float:
        number = as_number(value)
        if number is None:
            raise bad
        return float(number)
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad
    raise bad


def as_number(value: Any) -> float | int | None:
    """A number from an int, a float or a numeric string such as "1e-4" (YAML 1.1 reads that
    as a string); None for anything else, booleans included."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            number = float(value.replace("_", ""))
        except ValueError:
            return None
        return int(number) if number.is_integer() and "." not in value else number
    return None
