"""Typed run configuration: one frozen dataclass per concern, built strictly from YAML.

A run is described by a `Config` with sections `env`, `algorithm`, `workers`, `learner`,
`run`, `logging` and `faults`. The `algorithm` section's class depends on
`algorithm.name`: a family's config (`rayrl.families`) adds the experience settings it
reads (replay for off-policy learning, the unroll queue for on-policy learning) and the
algorithm its own fields. This
module knows no algorithm: `build_config` is handed the classes by name, which
`rayrl.presets` (the loader users call) does.

Validation is strict and happens before anything starts (`rayrl.strict`): an unknown key
gets a "did you mean", a wrong type or an out-of-range value names the dotted key, the
value and what is valid. Values that a type and bounds cannot vet are checked here too
(`checked` fields): a run name that is one plain directory, a device torch can parse,
GPU amounts that Ray can schedule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from rayrl.errors import ConfigError, did_you_mean
from rayrl.strict import bounded, build, checked, to_plain

NetworkKind = Literal["auto", "mlp", "nature_cnn", "minatar_cnn"]
MLPActivation = Literal["relu", "tanh"]

RAY_PRECISION = 1e-4
"""The smallest amount of a resource Ray schedules."""
RUN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._+-]{0,254}")
"""One plain directory name: a name with a path separator, `..` or a leading `/` would put
the run outside `run.runs_dir`, and `.` or "" would be `run.runs_dir` itself. "+" names a
variant (`minatar_ppo+decay-Breakout-s0`, as bench/learning.py names its runs)."""


def run_name_problem(name: str) -> str | None:
    """What is wrong with a run name, if anything (a `checked` field's check)."""
    if RUN_NAME.fullmatch(name):
        return None
    return (
        "is not a plain directory name (the run's one directory under run.runs_dir); valid: "
        "up to 255 letters, digits, '.', '_', '+' and '-', not starting with '.' or '+'"
    )


def torch_device_problem(device: str) -> str | None:
    """What torch's own parser says is wrong with a device string, if anything. torch is
    imported only for a device other than the default "auto"."""
    if device == "auto":
        return None
    import torch

    try:
        torch.device(device)
    except RuntimeError:
        return (
            "is not a torch device; valid: 'auto' (CUDA when the learner sees a GPU, else "
            "CPU), 'cpu', 'cuda', 'cuda:N' (N a GPU index from 0), 'mps', or another torch "
            "device type"
        )
    return None


def ray_gpus_problem(amount: float) -> str | None:
    """What Ray would refuse in a GPU amount, if anything (when it creates the learner, hours
    into a run that waited for a GPU node): a fraction of a GPU is shared, but more than one
    must be whole GPUs."""
    if 0 < amount < RAY_PRECISION or (amount > 1 and not float(amount).is_integer()):
        return (
            f"is not an amount Ray schedules; valid: 0, a fraction of one GPU from "
            f"{RAY_PRECISION:g} to 1, or a whole number"
        )
    return None


@dataclass(frozen=True)
class NormalizeConfig:
    """Observation and reward normalisation (`rayrl.normalization`): the running statistics
    live in the learner; the observations' travel with the weights, so workers, evaluation,
    checkpoints and resumes all see the same inputs."""

    observations: bool = False
    """Feed every network (obs - mean) / std from running statistics of the observations
    the workers collect; needs float observations (Box), not frames or grids."""
    rewards: bool = False
    """Learn from rewards divided by the standard deviation of a running discounted return
    (with the algorithm's gamma; SB3's VecNormalize, CleanRL's NormalizeReward), so that
    values and their gradients have about unit scale whatever the task's reward scale.
    On-policy algorithms (ppo, impala); episode returns are reported unscaled."""
    clip: float = bounded(10.0, gt=0.0)
    """Normalized observations and rewards are clipped to [-clip, clip] (SB3's VecNormalize
    default)."""


@dataclass(frozen=True)
class AtariConfig:
    """The DeepMind preprocessing of `ALE/<Game>-v5` ids (Mnih et al. 2015), done in
    ale-py's C++ vector env."""

    frame_stack: int = bounded(4, ge=1)
    """84x84 grayscale frames stacked into one observation."""
    frame_skip: int = bounded(4, ge=1)
    """Emulator frames per agent step (the last two are max-pooled)."""
    noop_max: int = bounded(30, ge=0)
    """Up to this many no-op actions after each reset."""
    fire_reset: bool = True
    """Press FIRE after reset in games that need it to start."""


@dataclass(frozen=True)
class EnvConfig:
    """Which environment to train on, and how it is preprocessed."""

    id: str = "CartPole-v1"
    """Gymnasium id; its env suite (`rayrl.envs`) builds it: `ALE/<Game>-v5` ids run in
    ale-py's C++ vector env with the DeepMind preprocessing (`env.atari`), `MinAtar/<Game>-v1` ids
    need `pip install 'rayrl[minatar]'`, any other id runs in a gymnasium synchronous
    vector env."""
    max_episode_steps: int | None = bounded(None, gt=0)
    """Truncate episodes after this many agent steps; None keeps the suite's or env's own
    limit (Atari: 108,000 frames, i.e. 27,000 steps with frame skip 4; MinAtar: 10,000
    steps)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for `gymnasium.make` (non-Atari envs)."""
    eval_id: str | None = None
    """Evaluate on this env id instead of `id` (same observation and action spaces)."""
    atari: AtariConfig = field(default_factory=AtariConfig)
    """The Atari suite's own preprocessing (read for `ALE/` ids only)."""
    repeat_action_probability: float | None = bounded(None, ge=0.0, le=1.0)
    """Atari and MinAtar: sticky actions (the previous action is repeated with this
    probability); None takes the suite's default: 0 for Atari (the DeepMind setting), 0.1
    for MinAtar (the MinAtar paper's)."""
    terminal_on_life_loss: bool | None = None
    """Training only: a lost life ends the bootstrap (episodic life). The game itself goes on,
    and episode returns and evaluation always count whole games. None takes the suite's
    default: true for Atari (the DeepMind setting), false otherwise."""
    clip_rewards: bool | None = None
    """Training only: learn from sign(reward); returns are always reported unclipped. None
    takes the suite's default: true for Atari (the DeepMind setting), false otherwise."""
    normalize: NormalizeConfig = field(default_factory=NormalizeConfig)
    """Observation and reward normalisation from running statistics (`rayrl.normalization`)."""


@dataclass(frozen=True)
class AlgorithmConfig:
    """Base of every algorithm's config: what every algorithm reads. The families
    (`rayrl.families`) add their experience settings, each algorithm its own fields."""

    name: str = ""
    """The algorithm: "dqn", "impala", "ppo", "appo" or "sac" (the keys of
    `rayrl.algorithms.ALGORITHMS`); a config that names none trains DQN. It picks which
    fields the rest of this section has."""
    network: NetworkKind = "auto"
    """Torso: "mlp", "nature_cnn" (the Nature DQN's, for stacked 84x84 frames),
    "minatar_cnn" (the MinAtar paper's, for (10, 10, C) grids), or "auto": the one that
    fits the observations."""
    hidden_sizes: tuple[int, ...] = bounded((128, 128), ge=1)
    """MLP hidden layer sizes (units per layer, each at least 1; none: a linear torso)."""
    gamma: float = bounded(0.99, ge=0.0, le=1.0)
    """Discount factor."""

    def check(self, config: Config) -> None:
        """Checks that involve other sections; families and algorithms extend it (calling
        `super().check(config)` first)."""


@dataclass(frozen=True)
class WorkersConfig:
    """Rollout workers: each hosts a vector env and a CPU copy of the policy."""

    num_workers: int = bounded(2, ge=1)
    """Rollout workers (Ray actors; stepped in turn by the local runtime)."""
    envs_per_worker: int = bounded(4, ge=1)
    """Environments in each worker's vector env."""
    cpus_per_worker: float = bounded(1.0, ge=RAY_PRECISION)
    """CPUs each worker asks Ray for; one node must have that many."""
    max_chunks_in_flight: int = bounded(2, ge=1)
    """Chunks a worker may have requested but not yet delivered to the experience store
    (backpressure)."""
    sample_timeout_s: float = bounded(300.0, gt=0.0)
    """A chunk not delivered within this time marks its worker as hung: it is killed and
    replaced."""
    env_threads: int = bounded(0, ge=0)
    """Atari: emulator threads per worker; 0 uses one per CPU the worker asks for."""
    oversubscribe: bool = False
    """Let a local Ray that rayrl starts hold more actors than `rayrl.ray.connect`'s bound
    (4 CPUs' worth per core of this machine, and the memory their processes need): beyond
    it a run is refused before it starts, since a typo in `num_workers` would otherwise
    take the machine down. A cluster that rayrl joins is bounded by its own CPUs, and (but
    for this setting) by its memory for actors (`rayrl.ray.capacity`)."""


@dataclass(frozen=True)
class LearnerConfig:
    """The learner: optimization steps and weight publication."""

    batch_size: int = bounded(64, ge=1)
    """Items per update: transitions (off-policy) or unrolls (on-policy)."""
    num_learners: int = bounded(1, ge=1)
    """Learner actors (Ray runtime): each takes its own batches and their gradients are
    all-reduced (torch DistributedDataParallel), so the effective batch is num_learners x
    batch_size and their parameters stay identical."""
    optimizer: Literal["adam", "rmsprop"] = "adam"
    """The optimizer of every learner."""
    lr: float = bounded(1e-3, gt=0.0)
    """Learning rate (on-policy: scaled for the run's budget when
    `algorithm.lr_reference_env_steps` is set)."""
    optimizer_eps: float = bounded(1e-8, gt=0.0)
    """Adam's (or RMSprop's) epsilon."""
    rmsprop_alpha: float = bounded(0.99, gt=0.0, lt=1.0)
    """RMSprop: smoothing constant of the squared-gradient average."""
    rmsprop_centered: bool = False
    """RMSprop: normalise by the gradient's estimated variance instead of its second moment
    (the MinAtar paper's DQN uses it)."""
    compile_optimizer: bool = False
    """RMSprop: compile its step with torch.compile, one fused loop over each parameter
    instead of torch's pass per operation, which on a CPU costs as much as a small
    network's forward and backward (the study: bench/reports/benchmarks.md). The first update pays
    for the compile (seconds; a C++ compiler on a CPU, Triton on a GPU); where compiling
    fails, the learner says so in one line and steps eagerly. Adam's step is torch's fused
    kernel already."""
    max_grad_norm: float | None = bounded(10.0, gt=0.0)
    """Clip the global gradient norm to this value; None disables clipping."""
    max_nonfinite_steps: int = bounded(10, ge=1)
    """An optimizer step whose gradient is NaN or infinite is skipped (the weights and the
    optimizer's state stay as they were); this many updates in a row with a skipped step
    stop the run, with the checkpoints saved before intact."""
    sync_interval: int = bounded(20, ge=1)
    """Publish new weights to the workers every this many updates."""
    device: str = checked("auto", torch_device_problem)
    """Torch device: "auto" (CUDA when torch sees one, else CPU), "cpu", "cuda" or "cuda:N"."""
    num_gpus: float | None = bounded(None, ge=0.0, check=ray_gpus_problem)
    """GPUs each learner actor asks Ray for (a fraction of one GPU, or whole GPUs); None asks
    for one when the cluster has a GPU for each learner and none otherwise."""
    num_threads: int = bounded(1, ge=1)
    """Torch CPU threads in the learner process."""
    batches_per_request: int = bounded(8, ge=1)
    """Ray runtime: batches the learner fetches from the experience actor per request; more
    amortizes the cost of an actor call (~1 ms) over small, fast updates."""
    prefetch_requests: int = bounded(2, ge=1)
    """Ray runtime: sample requests the learner keeps in flight, so that it never waits for
    the experience actor to answer. Each one holds a batch taken from the store before the
    learner needs it: on-policy, its unrolls are that many updates older when learned from.
    1 waits for one round trip per request (about a millisecond) and learns from fresher
    unrolls, which counts where every update moves the policy far (IMPALA with several
    `algorithm.epochs`)."""


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
    """Stop after this much wall-clock time, counted over every segment of a resumed run
    (up to the checkpoint each resume goes on from); None means no limit."""
    target_return: float | None = None
    """Stop as soon as an evaluation's mean return reaches this value; None means never."""
    eval_interval_env_steps: int = bounded(10_000, ge=1)
    """Evaluate the policy every this many env steps, with the algorithm's evaluation
    protocol (`algorithm.eval_epsilon` or `algorithm.eval_policy`)."""
    eval_episodes: int = bounded(10, ge=1)
    """Episodes per evaluation."""
    eval_timeout_s: float = bounded(900.0, gt=0.0)
    """Ray runtime: an evaluation that takes longer than this is abandoned and its actor
    replaced (a hung env must not silently stop evaluation)."""
    evaluator: Literal["auto", "actor", "driver"] = "auto"
    """Ray runtime: where evaluations run. "actor": a process of their own; "driver": a thread
    of the driver's process, which spares a small machine a process and its torch import (a
    hung evaluation there is cancelled, not killed; after an env step that never returns,
    actors take over); "auto": the driver when the Ray cluster is this machine alone (every
    node here, none an autoscaler can add), with at most 4 cores, an actor otherwise."""
    checkpoint_interval_env_steps: int = bounded(50_000, ge=1)
    """Save a checkpoint every this many env steps (and at the end of the run)."""
    keep_checkpoints: int = bounded(3, ge=1)
    """Periodic checkpoints kept on disk (the `best` and `latest` ones are kept as well)."""
    init_checkpoint: str | None = None
    """Start a new run's network from this checkpoint's weights (a warm start: fresh
    optimizer and counters; `--resume` continues a run instead)."""
    runs_dir: str = "runs"
    """Directory under which each run gets its own directory."""
    name: str | None = checked(None, run_name_problem)
    """Run directory name, one directory under `runs_dir` (letters, digits, '.', '_', '-',
    not starting with '.'); None makes one from the env, the algorithm and the start
    time."""


@dataclass(frozen=True)
class FaultsConfig:
    """What a run does when its parts fail. Restarts, timeouts and capacity apply to the Ray
    runtime; write errors to both runtimes. The hang and start timeouts (and
    `workers.sample_timeout_s`, `run.eval_timeout_s`) count the seconds an actor could run:
    a second in which it waited for a core that other processes had counts only in part
    (at most ten times less), a stopped process's whole (`rayrl.ray.watchdog`)."""

    worker_restarts: int = bounded(5, ge=0)
    """Restarts of one rollout worker within `restart_window_s` beyond which the run stops
    (an env that crashes on start must not restart forever)."""
    learner_restarts: int = bounded(3, ge=0)
    """Restores of the learner(s) within `restart_window_s` beyond which the run stops."""
    store_restarts: int = bounded(3, ge=0)
    """Re-creations of the experience actor within `restart_window_s` beyond which the run
    stops."""
    evaluator_restarts: int = bounded(5, ge=0)
    """Replacements of the evaluator within `restart_window_s` beyond which the run stops."""
    restart_window_s: float = bounded(1800.0, gt=0.0)
    """The window the restart limits count in."""
    restart_backoff_s: float = bounded(2.0, ge=0.0)
    """The first restart of an actor within the window is immediate; each later one waits
    this long, doubled every time, up to `max_restart_backoff_s`. An error raised in an
    actor's constructor is never retried: the run stops with it."""
    max_restart_backoff_s: float = bounded(60.0, ge=0.0)
    """The longest wait before a restart."""
    probe_timeout_s: float = bounded(600.0, gt=0.0)
    """A learner or experience actor that leaves its supervisor's probe unanswered this
    long is hung (its process stopped or frozen, a deadlock holding the GIL): it is killed
    and restarted. The probe runs in a thread of its own, so a long update or save does not
    delay its answer."""
    stall_timeout_s: float = bounded(600.0, gt=0.0)
    """A learner whose update makes no progress this long while none of its group waits
    for the experience actor (a CUDA kernel or an all-reduce that never returns), or an
    experience actor whose lock a call holds this long with no save under way, is hung: it
    is killed and restarted. A learner waiting on a saving or hung experience actor is not
    hung."""
    start_timeout_s: float = bounded(900.0, gt=0.0)
    """A learner that has not started this long after it was created stops the run (with
    the GPUs and CPUs it waits for); a worker that has not started is replaced, unless the
    cluster has no CPU free for it (it then waits for capacity, see
    `no_workers_timeout_s`)."""
    no_workers_timeout_s: float = bounded(1800.0, gt=0.0)
    """Training goes on with the workers that remain when capacity is lost, and takes the
    others back when it returns; with no worker running for this long the run stops."""
    max_write_errors: int = bounded(3, ge=1)
    """A write to the run directory (checkpoint, replay, metrics) is tried 3 times; this many
    failed writes in a row stop the run, with what was saved before intact."""


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
    """Record one evaluation episode (the evaluation protocol's actions) as a video every
    this many evaluations (the first
    evaluation included): saved under the run's `videos/` and uploaded to W&B when it is
    enabled. None (the default) records none; videos need `pip install 'rayrl[video]'`."""


@dataclass(frozen=True)
class Config:
    """A whole run. Every field has a default; presets override some. `build_config` gives
    `algorithm` the named algorithm's own config class."""

    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment to train on (`env.id`) and how it is preprocessed."""
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    """The algorithm and its settings: `algorithm.name` picks one, whose config class (the
    settings every algorithm has, its family's and its own) gives the other keys."""
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    """Rollout workers: how many, the envs each one steps, and what each asks Ray for."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """The learner: batches, optimizer, gradient clipping, device and weight publication."""
    run: RunConfig = field(default_factory=RunConfig)
    """The run: runtime, seed, budget, evaluation, checkpoints and its directory."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Where metrics go besides the run directory's JSONL file: the console, TensorBoard,
    Weights & Biases, videos."""
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    """What a run does when its parts fail: restart limits and backoff, hang and start
    timeouts, failed writes."""

    @property
    def total_envs(self) -> int:
        """Training environments over all workers."""
        return self.workers.num_workers * self.workers.envs_per_worker


# --------------------------------------------------------------------------------------------
# Reading sources, overrides, building
# --------------------------------------------------------------------------------------------

DEFAULT_PRESET = "cartpole_dqn"
DEFAULT_ALGORITHM = "dqn"
"""The algorithm of a config that names none (the default preset's)."""


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


def build_config(
    data: Mapping[str, Any], algorithms: Mapping[str, type[AlgorithmConfig]]
) -> Config:
    """Build and validate a `Config` from a plain mapping (YAML-shaped); `algorithms` maps
    each algorithm name to its config class."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"the config: expected a mapping of sections, got {data!r}")
    section = data.get("algorithm")
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"algorithm: expected a mapping of keys, got {section!r}")
    name = section.get("name", DEFAULT_ALGORITHM)
    if name not in algorithms:
        raise ConfigError(
            f"algorithm.name: unknown algorithm {name!r}{did_you_mean(str(name), algorithms)}; "
            f"valid: {', '.join(algorithms)}"
        )
    algorithm = build(algorithms[name], section, "algorithm")
    config = build(Config, {**data, "algorithm": algorithm}, "")
    check_config(config)
    return config


def check_config(config: Config) -> None:
    """Checks that involve more than one section."""
    if config.run.runtime == "local" and config.learner.num_learners > 1:
        raise ConfigError(
            f"learner.num_learners={config.learner.num_learners} needs the Ray runtime "
            "(run.runtime=ray); the local runtime has one learner"
        )
    if config.learner.compile_optimizer and config.learner.optimizer != "rmsprop":
        raise ConfigError(
            "learner.compile_optimizer=true compiles RMSprop's step, and learner.optimizer="
            f"{config.learner.optimizer!r} steps with torch's fused kernel already: set "
            "learner.optimizer=rmsprop, or learner.compile_optimizer=false"
        )
    config.algorithm.check(config)


def config_to_dict(config: Any) -> dict[str, Any]:
    """A dataclass config as plain YAML/JSON-safe values (tuples become lists)."""
    return to_plain(config)


def config_to_yaml(config: Config) -> str:
    """The resolved config as YAML, in schema order."""
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)
