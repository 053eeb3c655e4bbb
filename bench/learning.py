"""Learning you can check: the shipped presets trained over seeds, beside published figures.
For users, docs/results.md (one row per shipped preset at its shipped settings, with its
curve in docs/results/); for the studies, bench/reports/learning.md (every preset and
variant, the rows measured before the records, and the reading of them).

Any shipped preset (`rayrl/configs/*.yaml`) trains here. A MinAtar preset trains on the
MinAtar games --games names (default Breakout and SpaceInvaders; MinAtar/<game>-v1); a preset
of another family (CartPole, Pendulum, MuJoCo, Pong) on its own env only, named in its runs
by that env's id without namespace and version (`ALE/Pong-v5`: Pong), so it needs no
--games. --env-steps is 1M for a MinAtar preset unless given, the preset's own budget
(`run.total_env_steps`) for another. Every run trains its whole budget
(`run.target_return=null`).

Runs one (preset, game, seed) at a time with the Ray runtime, each in its own run directory
under --runs (default bench/results/learning, not committed), so that a table can grow
across sittings: a run that was stopped resumes from its last checkpoint, one that reached
its budget is skipped, and a larger budget continues it, unless the preset's schedules span
the budget or its rate is scaled for it (minatar_impala does both): such a run is the run of its
budget only, and its name carries the budget (minatar_impala-Breakout-s0-5000000), so that
one seed's runs to 1M and to 5M are two runs. A run whose record is kept but whose directory
is not under --runs (it ran on another machine) is refused rather than replaced; a larger
budget than that record's is a run of its own, named by its budget, and the table takes
each seed's run planned nearest to a row's budget (the shorter run's final evaluation on
FINAL_EPISODES episodes stays its row's figure). A variant of a preset is named with
--label and its --set overrides, and gets its own rows (in the studies only).

The run directories (checkpoints, replay) stay on the machine that ran them; what the tables
and the curves need of each run (its evaluations, its training returns, wall time and the
learner's busy share, per log row) is kept in bench/learning_records/<run>.json, which is
committed, so the tables made on a later machine still hold every earlier run. Rows
measured before the records existed are kept verbatim in bench/learning_earlier.md. Every
call rewrites both pages from the records: docs/results.md takes each shipped preset's runs
at its shipped settings (records without a variant label) and budget (or, short of it, the
longest budget measured), on its own game (and SpaceInvaders for a MinAtar preset), and says
"not measured yet", with the command that would measure it, where there are none;
bench/reports/learning.md holds the whole table, with bench/learning_notes.md (the reading
of the table) under it.

    python bench/learning.py --preset minatar_ppo --games Breakout --seeds 0 --env-steps 5000000
    python bench/learning.py --preset cartpole_ppo --seeds 0 1 2    # on CartPole-v1, 100k steps
    python bench/learning.py --preset minatar_dqn --label spi8 \\
        --set algorithm.replay.samples_per_insert=8 --set algorithm.target_update_every=250 \\
        --games Breakout SpaceInvaders --seeds 0 1 2 --env-steps 1000000
    python bench/learning.py --report        # train nothing: only rewrite the two pages
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import logging
import math
import os
import re
import shlex
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common import machine

import rayrl
from rayrl.checkpoint import load_checkpoint
from rayrl.config import Config, config_to_dict, preset_names
from rayrl.errors import CheckpointError
from rayrl.families.on_policy import OnPolicyConfig, budget_lr
from rayrl.files import atomic_path, read_jsonl
from rayrl.plot import Curves, curves_of, draw_curves, save_png
from rayrl.presets import load_config, saved_config
from rayrl.rundir import RunDirectory

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "bench" / "results" / "learning"
RESULTS = ROOT / "docs" / "results.md"
"""For users: one row per shipped preset at its shipped settings, each with its curve."""
CURVES = ROOT / "docs" / "results"
"""The curves of RESULTS' rows (`<preset>-<game>.png`), and nothing else: a curve that no
row draws any more is removed."""
STUDIES = ROOT / "bench" / "reports" / "learning.md"
README = ROOT / "README.md"
"""Its presets table, between README_MARKERS, is the results table's short form."""
README_MARKERS = ("<!-- presets:start -->", "<!-- presets:end -->")
"""The studies: every preset and variant at every budget measured, the rows measured before
the records, the commands, NOTES and the evaluation protocols."""
RECORDS = ROOT / "bench" / "learning_records"
"""One JSON file per run: what the table and the curves need of it (committed)."""
EARLIER = ROOT / "bench" / "learning_earlier.md"
"""Table rows measured before the records existed (their runs were on a machine that is
gone), each kept verbatim until the records give a row for its preset, game and budget."""
VARIANT_SUFFIX = ".variant.json"
"""Beside a run directory (`<run>.variant.json`; rayrl starts a run only in an empty
directory): the variant's overrides, written when the run starts, so that its record and a
resume know them."""
FINAL_SUFFIX = ".final_eval.json"
"""Beside a run directory: the evaluation of its last checkpoint on FINAL_EPISODES
episodes, made once the run has reached its budget."""
FINAL_EPISODES = 100
"""Episodes of the final evaluation. The runs' own evaluations play the preset's 20, whose
mean has a standard error of 5-10 on SpaceInvaders (returns spread 20-40 across
episodes): too much to rank settings by. 100 episodes halve it or better, and take
seconds to a minute here (a vector env of the evaluator's envs, one process)."""
METRICS = ("env_steps", "run/wall_s", "worker/episode_return", "learner/utilization")
EVALS = (
    "env_steps",
    "eval/return_mean",
    "eval/return_min",
    "eval/return_max",
    "eval/return_std",
    "eval/episodes",
)
"""The columns of the metrics and evaluation rows that a record keeps. Records written
before 2026-11-27 hold the first four evaluation columns only (no spread, so no standard
error of a single seed's figure)."""
SETTINGS = ("env", "algorithm", "learner", "workers")
"""The config sections that make a run what it learns (`run.*` is its seed, budget and
paths): a record keeps them, so that a row whose preset has changed since is caught."""
SPEED_ONLY = frozenset({"learner.compile_optimizer"})
"""Settings that change how fast a run trains, not what it learns (the compiled RMSprop
step is the eager one's arithmetic): a run or preset that changes one still trains what
its record's row names."""
NOTES = ROOT / "bench" / "learning_notes.md"
"""The hand-written reading of the table (targets met or missed, by how much, and why),
placed under it in STUDIES."""
MINATAR_GAMES = ("Breakout", "SpaceInvaders")
"""The games a MinAtar preset trains on without --games."""

PAPER = "MinAtar paper (Young & Tian 2019, Fig. 2), 5M frames"
PAPER_5M = {
    # the curves of the paper's Fig. 2 (the MinAtar README's img/learning_curves.gif: 30
    # seeds, training returns averaged over 100 episodes) at 5M frames; Breakout and
    # SpaceInvaders as the paper's text gives them, the other three read off the figure
    "DQN": {
        "Asterix": 17.0,
        "Breakout": 10.0,
        "Freeway": 50.0,
        "Seaquest": 20.0,
        "SpaceInvaders": 43.0,
    },
    "AC(lambda)": {
        "Asterix": 19.0,
        "Breakout": 17.0,
        "Freeway": 47.0,
        "Seaquest": 15.0,
        "SpaceInvaders": 185.0,
    },
}
MINIMAL_ACTIONS = {"Asterix": 5, "Breakout": 3, "Freeway": 3, "Seaquest": 6, "SpaceInvaders": 4}
"""The paper acts with all 6 actions, the -v1 ids with each game's minimal set."""
PAPER_ALGORITHM = {
    "dqn": ("DQN", "DQN"),
    "impala": ("AC(lambda)", "AC(lambda), not IMPALA"),
    "ppo": ("AC(lambda)", "AC(lambda)"),
    "appo": ("AC(lambda)", "AC(lambda), not APPO"),
}
"""Each preset's algorithm: the paper's curve it is set beside, and how the table names it."""


SPREAD_V2_SELF_COLLISION = 12.5
"""What PettingZoo 1.12's simple_spread_v2 charged each agent per episode for colliding with
itself (its collision count included the agent: -1 a step, at local_ratio 0.5, over 25
steps; PettingZoo 1.22.4 fixed it): added to a v2 return, it puts it on mpe2's v3 reward."""
MARLLIB = "MARLlib (Hu et al. 2022; results/mpe in its repository, commit 23b0628), 20M env steps"
MARLLIB_SPREAD_IPPO = -33.3
"""MARLlib's IPPO (RLlib's PPO, one GRU policy shared by the agents) on simple_spread_v2:
the shared policy's mean agent return over training episodes, the mean over its 4 seeds of
the last 100 logged points (the last 250k of 20M env steps)."""
CLEANRL_PPO = (
    "CleanRL (Huang et al. 2022; docs.cleanrl.dev/rl-algorithms/ppo, ppo_continuous_action.py, "
    "its benchmark tag pr-424), 1M env steps"
)
CLEANRL_HALFCHEETAH_PPO = 1442.6
"""CleanRL's ppo_continuous_action.py, the script whose settings and network
`halfcheetah_ppo` copies, on HalfCheetah-v4 at its 1M env steps: the mean of its seeds'
average episodic returns (1442.64 +- 46.03), over training episodes (actions sampled from
the policy)."""
OTHER_PUBLISHED = {
    ("ppo", "HalfCheetah"): (
        CLEANRL_HALFCHEETAH_PPO,
        CLEANRL_PPO,
        "training episodes (sampled actions), HalfCheetah-v4 (v5 here: the same dynamics "
        "and reward)",
        "CleanRL's PPO, 1M env steps",
    ),
    ("ppo", "simple_spread"): (
        round(MARLLIB_SPREAD_IPPO + SPREAD_V2_SELF_COLLISION, 1),
        MARLLIB,
        f"IPPO, one shared GRU policy; training returns; {MARLLIB_SPREAD_IPPO:g} on PettingZoo "
        f"1.12's simple_spread_v2, less its self-collision charge ({SPREAD_V2_SELF_COLLISION:g} "
        "an episode), with v2's dynamics (the velocity updated before the move)",
        "IPPO, MARLlib, 20M env steps",
    ),
}
"""Published figures off MinAtar by (algorithm, game): (return, source, how it differs,
the results page's name for it)."""


def published(algorithm: str, game: str) -> tuple[float, str, str]:
    """The published figure for a preset's algorithm on a game: (return, source, how its
    protocol differs from ours); NaN and "-" where there is none."""
    if (algorithm, game) in OTHER_PUBLISHED:
        return OTHER_PUBLISHED[algorithm, game][:3]
    if algorithm not in PAPER_ALGORITHM or game not in MINIMAL_ACTIONS:
        return math.nan, "-", "-"
    curve, name = PAPER_ALGORITHM[algorithm]
    differs = f"{name}; training returns; 6 actions, ours {MINIMAL_ACTIONS[game]}"
    if game == "Seaquest":
        differs += "; before MinAtar 1.0.11's oxygen fix"
    return PAPER_5M[curve][game], PAPER, differs


GYMNAX_PPO = {"Breakout": 28.0, "SpaceInvaders": 131.0, "Asterix": 15.0, "Freeway": 58.0}
"""gymnax-blines' PPO at 10M steps: no sticky actions, minimal action set, episodes cut at
1,000 steps (Freeway 2,500), an MLP on the flattened grid."""


FOLLOWS = {
    "cartpole_dqn": "the CartPole protocol (mean of 10 greedy episodes, 475 solves it)",
    "cartpole_impala": "the CartPole protocol",
    "cartpole_ppo": "the CartPole protocol",
    "cartpole_appo": "the CartPole protocol",
    "cartpole_pomdp_ppo": "the CartPole protocol, observing positions only",
    "cartpole_pomdp_ppo_feedforward": "the CartPole protocol, observing positions only",
    "minatar_impala_lstm": "the policy's samples (the MinAtar paper reports training returns)",
    "pong_dqn": "Nature DQN (30 episodes, epsilon 0.05, up to 30 no-ops; cap 30 min, not 5)",
    "pong_impala": "the IMPALA paper (the policy's samples)",
    "pong_ppo": "the PPO paper and CleanRL (the policy's samples)",
    "minatar_dqn": "Nature DQN's epsilon 0.05 (the MinAtar paper reports training returns)",
    "minatar_impala": "the policy's samples (the MinAtar paper reports training returns)",
    "minatar_ppo": "the policy's samples, as gymnax-blines evaluates",
    "pendulum_sac": "SB3 rl-zoo's (deterministic actions; -200 counts as solved)",
    "halfcheetah_sac": "CleanRL's SAC (deterministic actions); CleanRL reports training returns",
    "hopper_sac": "CleanRL's SAC (deterministic actions); CleanRL reports training returns",
    "halfcheetah_ppo": "CleanRL's PPO reports training returns; here the Gaussian's mean",
    "mpe_spread_ppo": (
        "the policy's samples; a return is the mean of the agents' returns over the episode "
        "(MARLlib reports the same mean over its training episodes)"
    ),
    "popgym_repeat_previous_ppo": (
        "the greedy policy's mean return (the POPGym paper reports MMER: the maximum over "
        "training of the mean episode return)"
    ),
}
"""Which published evaluation protocol each preset follows."""


def acting(config: Config) -> str:
    """How a preset acts in its evaluations: epsilon-greedy (with its epsilon), greedy,
    sampled from its policy, or SAC's deterministic squashed mean."""
    algo = config.algorithm
    if hasattr(algo, "eval_epsilon"):
        return f"epsilon-greedy, {algo.eval_epsilon:g}" if algo.eval_epsilon else "greedy"
    if hasattr(algo, "eval_policy"):
        return {"sample": "sampled", "greedy": "greedy"}[algo.eval_policy]
    return "deterministic (SAC's squashed mean)"


def protocols() -> list[str]:
    """A table of every preset's evaluation protocol, read from the presets themselves."""
    lines = [
        "## Evaluation protocols",
        "",
        "How each shipped preset evaluates (`run.eval_episodes` episodes on `env.eval_id` or",
        "the training env, whole games with raw scores) and what it learns from.",
        "",
        "| preset | acting | episodes | sticky actions | learning signal | follows |",
        "|---|---|---|---|---|---|",
    ]
    for name in preset_names():
        config = shipped(name)
        env = config.env
        signal = ", ".join(
            text
            for on, text in (
                (env.clip_rewards, "clipped"),
                (env.terminal_on_life_loss, "life"),
                (env.normalize.observations, "normalized observations"),
                (env.normalize.rewards, "normalized rewards"),
            )
            if on
        )
        lines.append(
            f"| `{name}` | {acting(config)} | {config.run.eval_episodes} | "
            f"{env.repeat_action_probability:g} | {signal or 'raw rewards'} | "
            f"{FOLLOWS.get(name, '-')} |"
        )
    return lines


def run_name(variant: str, game: str, seed: int, budget: int | None = None) -> str:
    """A run's name: its variant, game and seed, and the budget of a run that is the run of
    that budget only (`run_path` says which), so that one seed's runs to 1M and to 5M are two
    runs, not one continued."""
    name = f"{variant}-{game}-s{seed}"
    return name if budget is None else f"{name}-{budget}"


RUN_NAME = re.compile(
    r"(?P<variant>\w+(\+\w+)?)-(?P<game>\w[\w-]*)-s(?P<seed>\d+)(-(?P<budget>\d+))?"
)
"""What `run_name` makes: a run directory of this benchmark."""


def variant_name(preset: str, label: str | None) -> str:
    """The preset, or the preset and the label of its variant ("minatar_dqn+spi8")."""
    return f"{preset}+{label}" if label else preset


def preset_of(variant: str) -> str:
    return variant.partition("+")[0]


@functools.cache
def shipped(preset: str) -> Config:
    """The preset as shipped, read once: the report asks it of every record (hundreds)."""
    return load_config(preset)


def is_minatar(preset: str) -> bool:
    """Whether `preset` is a MinAtar one, trained on the games --games names."""
    return shipped(preset).env.id.startswith("MinAtar/")


def game_of(env_id: str) -> str:
    """An env's name in run names and tables: its id without namespace and version
    (`MinAtar/Breakout-v1`: Breakout, `ALE/Pong-v5`: Pong, `rayrl/CartPoleNoVel-v1`:
    CartPoleNoVel), and without the module a "module:EnvId" id imports
    (`popgym:popgym-RepeatPreviousEasy-v0`: popgym-RepeatPreviousEasy) or the package of
    a PettingZoo module (`pettingzoo:mpe2.simple_spread_v3`: simple_spread)."""
    name = env_id.rpartition(":")[2].rpartition("/")[2].rpartition(".")[2]
    return re.sub(r"[-_]v\d+$", "", name)


def own_game(preset: str) -> str:
    """The game of the preset's own env (Breakout for the MinAtar presets)."""
    return game_of(shipped(preset).env.id)


def games_of(preset: str, games: list[str] | None) -> list[str]:
    """The games a run of `preset` trains on: those --games names for a MinAtar preset
    (MINATAR_GAMES without it); the preset's own env for any other, which --games may name
    but not change."""
    if is_minatar(preset):
        return games or list(MINATAR_GAMES)
    own = own_game(preset)
    if games and games != [own]:
        raise SystemExit(
            f"{preset} trains on its own env ({shipped(preset).env.id}, {own} in run "
            "names) only: leave --games out"
        )
    return [own]


def game_env_id(preset: str, game: str) -> str:
    """The env id of `preset`'s runs on `game`: MinAtar/<game>-v1 for a MinAtar preset, the
    preset's own for any other."""
    return f"MinAtar/{game}-v1" if is_minatar(preset) else shipped(preset).env.id


def game_overrides(preset: str, game: str) -> list[str]:
    """The overrides that put `preset` on `game`: the MinAtar game's id, none for another
    family's preset (it runs its own env as shipped)."""
    return [f"env.id={game_env_id(preset, game)}"] if is_minatar(preset) else []


def budget_scheduled(config: dict) -> bool:
    """Whether the run's schedules (learning rate, PPO's clip range and entropy bonus) are
    spread over its budget, or its learning rate is scaled for it
    (`algorithm.lr_reference_env_steps`), so that the run is only the run of that budget at
    its end."""
    algorithm = config["algorithm"]
    return bool(
        algorithm.get("lr_decay")
        or algorithm.get("clip_anneal")
        or algorithm.get("entropy_coef_final") is not None
        or algorithm.get("lr_reference_env_steps") is not None
    )


def run_path(
    runs: Path, variant: str, overrides: list[str], game: str, seed: int, env_steps: int
) -> Path:
    """Where the run of `variant` (a preset and its `overrides`) on `game` with `seed` to
    `env_steps` is, under `runs`."""
    config = config_to_dict(load_config(preset_of(variant), overrides))
    if budget_scheduled(config):
        return runs / run_name(variant, game, seed, env_steps)
    path = runs / run_name(variant, game, seed)
    if shorter_run_elsewhere(path, env_steps):
        return runs / run_name(variant, game, seed, env_steps)
    return path


def shorter_run_elsewhere(path: Path, env_steps: int) -> bool:
    """Whether the run in `path` is kept only as a record (its directory is on another
    machine) of a budget short of `env_steps`: a run to `env_steps` cannot continue it, and
    starts afresh under a name of its own rather than replacing that record."""
    kept = RECORDS / f"{path.name}.json"
    if path.is_dir() or not kept.is_file():
        return False
    return json.loads(kept.read_text())["planned_env_steps"] * SLACK < env_steps


def train(
    runs: Path, variant: str, overrides: list[str], game: str, seed: int, env_steps: int
) -> Path:
    """Train (or continue) one run of `variant` (a preset and its `overrides`) to
    `env_steps`; its directory. A run whose record is kept but whose directory is not under
    `runs` is refused: a fresh run of the same name would replace that record."""
    games_of(preset_of(variant), [game])  # another family's preset: its own env only
    path = run_path(runs, variant, overrides, game, seed, env_steps)
    budget = [f"run.total_env_steps={env_steps}", "run.target_return=null"]
    if (path / "checkpoints" / "latest.pt").is_file():
        recorded = variant_overrides(path)
        if recorded != overrides:
            raise SystemExit(
                f"{path.name} was trained with --set {recorded}, not {overrides}: give the "
                "same settings, or another --label for other ones"
            )
        done = max((r["env_steps"] for r in read_jsonl(path / "metrics.jsonl")), default=0)
        if done >= env_steps:
            print(f"{path.name}: {done:,} env steps already, skipped", flush=True)
            return path
        print(f"{path.name}: resuming at {done:,} env steps", flush=True)
        rayrl.train(resume=path, overrides=budget, trust_env=True)  # a run made here
        return path
    if (kept := RECORDS / f"{path.name}.json").is_file():
        raise SystemExit(
            f"{kept} keeps a run named {path.name} whose directory is not "
            f"under {runs}, and a fresh run would replace its record: give --runs the "
            "directory that holds it to continue it, another seed, or, to run it again "
            "on purpose, delete that record first"
        )
    runs.mkdir(parents=True, exist_ok=True)
    variant_file(path).write_text(json.dumps(overrides) + "\n")
    rayrl.train(
        preset_of(variant),
        overrides=[
            *overrides,
            *game_overrides(preset_of(variant), game),
            f"run.seed={seed}",
            f"run.runs_dir={runs}",
            f"run.name={path.name}",
            "logging.console=false",
            *budget,
        ],
    )
    return path


def final_file(path: Path) -> Path:
    return path.with_name(path.name + FINAL_SUFFIX)


def evaluate_final(path: Path) -> None:
    """Evaluate the last checkpoint of a run that reached its budget on FINAL_EPISODES
    episodes (with the run's own protocol), once, beside the run."""
    file = final_file(path)
    run = RunDirectory.open(path)
    if not run.latest_checkpoint.is_file():
        return
    env_steps = load_checkpoint(run.latest_checkpoint)["counters"]["env_steps"]
    if env_steps < run.raw_config()["run"]["total_env_steps"]:
        return  # stopped early: a resume continues it
    if file.is_file() and json.loads(file.read_text())["env_steps"] == env_steps:
        return
    try:
        result = rayrl.evaluate(
            path,
            episodes=FINAL_EPISODES,
            which="latest",
            trust_env=True,  # a run made here
        )
    except CheckpointError as exc:  # one unreadable run must not stop the report
        print(f"{path.name}: no final evaluation ({exc})", flush=True)
        return
    metrics = result.metrics()
    final = {"env_steps": env_steps, **{k: metrics[k] for k in EVALS[1:]}}
    with atomic_path(file) as tmp:
        tmp.write_text(json.dumps(final) + "\n")


def final_evaluation(path: Path) -> list | None:
    """The run's final evaluation as a record row (EVALS' columns), if it has one."""
    file = final_file(path)
    return columns([json.loads(file.read_text())], EVALS)[0] if file.is_file() else None


def variant_file(path: Path) -> Path:
    return path.with_name(path.name + VARIANT_SUFFIX)


def variant_overrides(path: Path) -> list[str]:
    """The overrides the run in `path` was started with (none for a preset's own run)."""
    file = variant_file(path)
    return json.loads(file.read_text()) if file.is_file() else []


def settings(config: dict) -> dict[str, object]:
    """The `SETTINGS` of a run's saved config (in today's layout, every default filled in),
    as dotted keys. An on-policy run's `learner.lr` is the rate it starts at for its budget
    (`algorithm.lr_reference_env_steps` and its exponent folded in, to 12 digits), so that a
    run given that rate directly and one given a rate and its reference budget compare as
    what they are: the same training."""
    loaded = saved_config(config)
    full = config_to_dict(loaded)
    flat = dotted({section: full[section] for section in SETTINGS})
    if isinstance(loaded.algorithm, OnPolicyConfig):
        started_at = budget_lr(loaded.algorithm, loaded.learner, loaded.run)
        flat["learner.lr"] = float(f"{started_at:.12g}")
        del flat["algorithm.lr_reference_env_steps"], flat["algorithm.lr_budget_exponent"]
    return flat


def dotted(nested: dict, prefix: str = "") -> dict[str, object]:
    """A nested mapping's values by dotted key."""
    flat: dict[str, object] = {}
    for key, value in nested.items():
        name = f"{prefix}{key}"
        flat.update(dotted(value, name + ".") if isinstance(value, dict) else {name: value})
    return flat


def undotted(flat: dict[str, object]) -> dict:
    nested: dict = {}
    for key, value in flat.items():
        *parents, last = key.split(".")
        inner = nested
        for name in parents:
            inner = inner.setdefault(name, {})
        inner[last] = value
    return nested


def stale_settings(record: dict) -> list[str]:
    """Where the run of `record` was trained otherwise than its preset and overrides train
    now ("learner.lr: 0.0005, now 0.002"): its label would then misname it. A field added
    to the config since the run counts at its default, which is what the run had: a preset
    that now sets it otherwise has changed. `SPEED_ONLY` settings are not compared."""
    if "settings" not in record:
        raise SystemExit(
            f"bench/learning_records/{record['run']}.json keeps no settings (it predates them): "
            "run `--report` where its run directory is, to write them"
        )
    # the game, and the budget that an on-policy run's starting rate depends on
    run_of_record = [
        *game_overrides(preset_of(record["variant"]), record["game"]),
        f"run.total_env_steps={record['planned_env_steps']}",
    ]
    now = settings_now(preset_of(record["variant"]), (*record["overrides"], *run_of_record))
    # the record's own settings, under today's names (`rayrl.renamed_keys`), with the
    # defaults of the fields it predates
    recorded = settings(config_to_dict(saved_config(undotted(record["settings"]))))
    return [
        f"{key}: {then!r}, now {now.get(key)!r}"
        for key, then in sorted(recorded.items())
        if now.get(key) != then and key not in SPEED_ONLY
    ]


@functools.cache
def settings_now(preset: str, overrides: tuple[str, ...]) -> dict[str, object]:
    """The settings `preset` with `overrides` trains with now, read once for the records
    that share them (a game's seeds)."""
    return settings(config_to_dict(load_config(preset, list(overrides))))


def rounded(value: float | None) -> float | None:
    """Four significant digits (a record stays small); None for a value that is missing
    or not finite (the row is then read back without it)."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.4g}")


def columns(rows: list[dict], keys: tuple[str, ...]) -> list[list]:
    """The rows as lists of `keys` (the first, env_steps, exact; the others `rounded`)."""
    return [[row[keys[0]], *(rounded(row.get(key)) for key in keys[1:])] for row in rows]


def expand(table: list[list], keys: tuple[str, ...]) -> list[dict]:
    """The rows that `columns` kept, as dicts without the values they lacked (an older
    record's rows may stop short of the last keys)."""
    if any(len(row) > len(keys) for row in table):
        raise ValueError(f"a record row has more columns than {keys}")
    return [{k: v for k, v in zip(keys, row, strict=False) if v is not None} for row in table]


def write_record(path: Path) -> None:
    """Keep what the table needs of the run in `path` in RECORDS (replacing an older
    record of it)."""
    name = RUN_NAME.fullmatch(path.name)
    assert name, f"{path.name} is not a run of this benchmark"
    saved = RunDirectory.open(path).raw_config()
    metrics_file = path / "metrics.jsonl"
    record = {
        "run": path.name,
        "variant": name["variant"],
        "overrides": variant_overrides(path),
        "game": name["game"],
        "seed": int(name["seed"]),
        "planned_env_steps": saved["run"]["total_env_steps"],
        "budget_scheduled": budget_scheduled(saved),
        "settings": settings(saved),
        "machine": machine(),
        "measured": datetime.date.fromtimestamp(metrics_file.stat().st_mtime).isoformat(),
        "evals": columns(read_jsonl(path / "eval.jsonl"), EVALS),
        "final_eval": final_evaluation(path),
        "metrics": columns(read_jsonl(metrics_file), METRICS),
    }
    with atomic_path(RECORDS / f"{path.name}.json") as tmp:
        tmp.write_text(json.dumps(record, separators=(",", ":")) + "\n")


@dataclass
class RunFigures:
    env_steps: int
    wall_s: float
    final_eval: float
    final_eval_se: float
    """The standard error of `final_eval` over its episodes (NaN where the record has no
    spread): the evaluation's own noise."""
    final_training: float
    learner_share: float
    """Fraction of the run's wall time its learner spent in optimization steps."""
    pace: float
    """Env steps per second of the run's clock over its second half: past its start-up and
    a replay's warm-up, the pace the rest of a longer budget would go at."""


SLACK = 1.01
"""A run "reached" a budget within 1%: runs stop on whole chunks and evaluations come at
the first log after an interval, a little past the round number."""


def figures(record: dict, budget: int) -> RunFigures | None:
    """The run's figures up to `budget` env steps (its evaluation there, not a later one),
    or None if it has not reached it, or if its schedules are spread over another budget
    (at `budget` it was not trained the way a run of that budget is)."""
    if record["budget_scheduled"] and not (
        budget / SLACK <= record["planned_env_steps"] <= budget * SLACK
    ):
        return None
    # a run planned for this budget stopped at its end, however far its last chunks went
    # past it (a short budget's 1% is less than a round of chunks)
    limit = math.inf if record["planned_env_steps"] == budget else budget * SLACK
    metrics = [r for r in expand(record["metrics"], METRICS) if r["env_steps"] <= limit]
    evals = [r for r in expand(record["evals"], EVALS) if r["env_steps"] <= limit]
    if not evals or evals[-1]["env_steps"] < budget / SLACK or "eval/return_mean" not in evals[-1]:
        return None
    final = expand([record["final_eval"]], EVALS)[0] if record.get("final_eval") else None
    if final and final["env_steps"] == evals[-1]["env_steps"]:
        evals[-1] = final  # the same weights, on FINAL_EPISODES episodes
    training = [r["worker/episode_return"] for r in metrics if "worker/episode_return" in r]
    utilization = [r["learner/utilization"] for r in metrics if "learner/utilization" in r]
    return RunFigures(
        env_steps=evals[-1]["env_steps"],
        wall_s=max(r.get("run/wall_s", 0.0) for r in metrics),
        final_eval=evals[-1]["eval/return_mean"],
        final_eval_se=standard_error_of_episodes(evals[-1]),
        final_training=statistics.mean(training[-10:]) if training else math.nan,
        learner_share=statistics.mean(utilization) if utilization else math.nan,
        pace=second_half_pace(metrics),
    )


def second_half_pace(metrics: list[dict]) -> float:
    """Env steps per second of the run's clock from its last metrics row at or before half
    its env steps to its last row (from its start where no row is that early); NaN
    without a timed row or time between them."""
    timed = [r for r in metrics if "run/wall_s" in r]
    if not timed:
        return math.nan
    last = timed[-1]
    early = [r for r in timed[:-1] if r["env_steps"] <= last["env_steps"] / 2]
    steps, wall = (early[-1]["env_steps"], early[-1]["run/wall_s"]) if early else (0, 0.0)
    elapsed = last["run/wall_s"] - wall
    return (last["env_steps"] - steps) / elapsed if elapsed > 0 else math.nan


def standard_error_of_episodes(evaluation: dict) -> float:
    """The standard error of an evaluation's mean over its episodes (NaN without its
    spread). `eval/return_std` is the episodes' population deviation (numpy's), so the
    sample deviation's error is std / sqrt(n - 1)."""
    episodes = evaluation.get("eval/episodes", math.nan)
    if not episodes > 1:
        return math.nan
    return evaluation.get("eval/return_std", math.nan) / math.sqrt(episodes - 1)


def standard_error(runs: list[RunFigures]) -> str:
    """The standard error of the row's mean evaluation return: across seeds (their standard
    deviation over the square root of their number) with several, the evaluation's own
    (over its episodes) with one."""
    if len(runs) > 1:
        return f"{statistics.stdev(r.final_eval for r in runs) / math.sqrt(len(runs)):.1f}"
    return "-" if math.isnan(runs[0].final_eval_se) else f"{runs[0].final_eval_se:.1f}"


def mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def read_records() -> dict[tuple[str, str], list[dict]]:
    """Every record, grouped by (variant, game), each group in seed order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for file in sorted(RECORDS.glob("*.json")):
        record = json.loads(file.read_text())
        groups.setdefault((record["variant"], record["game"]), []).append(record)
    return {key: sorted(group, key=lambda r: r["seed"]) for key, group in sorted(groups.items())}


def nearest_runs(found: list[tuple[dict, RunFigures]]) -> list[tuple[dict, RunFigures]]:
    """One run per seed of those that reached a budget: the one planned for the smallest
    budget (a 1M run's final evaluation on FINAL_EPISODES episodes, not a 5M run's on the
    way), in seed order."""
    nearest: dict[int, tuple[dict, RunFigures]] = {}
    for record, found_figures in sorted(found, key=lambda rf: -rf[0]["planned_env_steps"]):
        nearest[record["seed"]] = (record, found_figures)
    return [nearest[seed] for seed in sorted(nearest)]


def algorithm_of(variant: str) -> str:
    """The algorithm of a variant's preset (`dqn`, `impala`, `ppo`, `sac`)."""
    return shipped(preset_of(variant)).algorithm.name


def table_rows(groups: dict[tuple[str, str], list[dict]]) -> dict[tuple[str, str, int], str]:
    """The table's rows from the records by (variant, game, budget): one at 1M env steps
    (every seed that reached it) and one at the longest budget any seed reached."""
    made = {}
    for (variant, game), members in groups.items():
        published_return, source, differs = published(algorithm_of(variant), game)
        reference = "-" if math.isnan(published_return) else f"{published_return:g}"
        longest = max((row[0] for r in members for row in r["evals"]), default=0)
        budgets = sorted({b for b in (1_000_000, round(longest, -5)) if b <= longest * SLACK})
        for budget in budgets:
            found = nearest_runs([(r, f) for r in members if (f := figures(r, budget))])
            if not found:
                continue
            runs = [f for _, f in found]
            steps = min(f.env_steps for f in runs)
            wall = statistics.mean(f.wall_s for f in runs)
            made[variant, game, budget] = (
                f"| `{variant}` | {game} | {len(runs)} | {steps:,} | "
                f"{mean_std([f.final_eval for f in runs])} | {standard_error(runs)} | "
                f"{min(f.final_eval for f in runs):.1f} | "
                f"{mean_std([f.final_training for f in runs])} | {wall / 60:.0f} min | "
                f"{wall / 60 / (steps / 1e6):.1f} min | "
                f"{100 * statistics.mean(f.learner_share for f in runs):.0f}% | "
                f"{reference} | {source}: {differs} | "
                f"{max(r['measured'] for r, _ in found)} |"
            )
    return made


def earlier_rows(made: set[tuple[str, str, int]]) -> list[str]:
    """The rows of bench/learning_earlier.md for which the records make no row of the same
    (preset, game, budget)."""
    kept = []
    for line in EARLIER.read_text().splitlines() if EARLIER.is_file() else []:
        if not line.startswith("| `"):
            continue
        preset, game, _, steps = (cell.strip() for cell in line.strip("|").split("|")[:4])
        if (preset.strip("`"), game, round(int(steps.replace(",", "")), -5)) not in made:
            kept.append(line)
    return kept


def earlier_text() -> list[str]:
    """bench/learning_earlier.md's prose: how its rows were made."""
    lines = EARLIER.read_text().splitlines()
    return [line for line in lines if line and not line.startswith(("#", "|"))]


def command(
    variant: str,
    overrides: list[str] | tuple[str, ...],
    games: list[str],
    seeds: list[int] | tuple[int, ...],
    budget: int,
) -> str:
    """The `bench/learning.py` command that trains `variant` (a preset and its `overrides`)
    on `games` with `seeds` to `budget` env steps; without --games for a preset of another
    family than MinAtar (it trains on its own env)."""
    preset, _, label = variant.partition("+")
    args = ["--preset", preset, *(["--label", label] if label else [])]
    args += [word for o in overrides for word in ("--set", o)]
    args += ["--games", *games] if is_minatar(preset) else []
    args += ["--seeds", *map(str, seeds), "--env-steps", str(budget)]
    return shlex.join(["python", "bench/learning.py", *args])


def commands(groups: dict[tuple[str, str], list[dict]]) -> list[str]:
    """The `bench/learning.py` commands that train the recorded runs: one per variant,
    budget and set of seeds, with the games trained that way."""
    games: dict[tuple[str, int, tuple[str, ...], tuple[int, ...]], list[str]] = {}
    for (variant, game), members in groups.items():
        by_budget: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        for record in members:
            key = (record["planned_env_steps"], tuple(record["overrides"]))
            by_budget.setdefault(key, []).append(record["seed"])
        for (budget, overrides), seeds in by_budget.items():
            games.setdefault((variant, budget, overrides, tuple(seeds)), []).append(game)
    return [
        command(variant, overrides, trained, seeds, budget)
        for (variant, budget, overrides, seeds), trained in sorted(games.items())
    ]


def result_games(preset: str) -> list[str]:
    """The games of a shipped preset's rows in RESULTS: its own, and SpaceInvaders too for a
    MinAtar preset."""
    own = own_game(preset)
    return list(dict.fromkeys([own, "SpaceInvaders"])) if is_minatar(preset) else [own]


def shipped_runs(members: list[dict], budget: int) -> tuple[int, list[tuple[dict, RunFigures]]]:
    """The runs of a shipped preset's row in RESULTS, from the records of the preset as
    shipped (no variant) on a game, and the budget they are taken at: each seed's run at the
    preset's own `budget`, or, where no seed reached it, at the longest budget short of it
    that one did (a budget a run was planned for, or its last evaluation's to 100k); none
    where nothing was recorded."""
    candidates = {budget} | {r["planned_env_steps"] for r in members}
    candidates |= {round(r["evals"][-1][0], -5) for r in members if r["evals"]}
    for at in sorted((b for b in candidates if b <= budget), reverse=True):
        if found := nearest_runs([(r, f) for r in members if (f := figures(r, at))]):
            return at, found
    return budget, []


def short_of_budget(runs: list[RunFigures], budget: int) -> str:
    """The env steps of a row whose runs stopped short of its preset's `budget`, with the
    time the whole budget would take a seed on the hardware they ran on (each seed's time so
    far and the rest at its `RunFigures.pace`, the mean over the seeds) and that pace (the
    mean over the seeds); the budget alone where no seed has a pace."""
    steps = min(f.env_steps for f in runs)
    paced = [f for f in runs if f.pace > 0]  # NaN compares False
    if not paced:
        return f"{steps:,} (budget {budget:,})"
    pace = statistics.mean(f.pace for f in paced)
    whole = statistics.mean(f.wall_s + (budget - f.env_steps) / f.pace for f in paced)
    return (
        f"{steps:,} (budget {budget:,}: about {duration(whole)} a seed here, at "
        f"{pace:,.0f} env steps/s)"
    )


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def time_to_target(found: list[tuple[dict, RunFigures]], target: float | None) -> str:
    """When the runs first evaluated at or above the preset's `run.target_return`: the
    median over the seeds that did of the env steps and of the run's wall time when it had
    trained on them (at its first metrics row from those env steps on, within one log
    interval; the evaluation ends a little later), and how many of the seeds did; "-"
    without a target."""
    if target is None:
        return "-"
    steps, walls = [], []
    for record, _ in found:
        evals = expand(record["evals"], EVALS)
        first = next((e["env_steps"] for e in evals if e["eval/return_mean"] >= target), None)
        if first is None:
            continue
        metrics = expand(record["metrics"], METRICS)
        later = [m["run/wall_s"] for m in metrics if m["env_steps"] >= first and "run/wall_s" in m]
        steps.append(first)
        walls.append(min(later) if later else math.nan)
    if not steps:
        return f"not reached (0/{len(found)})"
    return (
        f"{statistics.median(steps):,.0f} env steps, {duration(statistics.median(walls))} "
        f"({len(steps)}/{len(found)})"
    )


def published_figure(algorithm: str, game: str) -> str:
    """The published figure of a RESULTS row: the return and what it is (the MinAtar
    paper's curve it is read off, or OTHER_PUBLISHED's name), "-" where the studies' table
    has none."""
    value, _, _ = published(algorithm, game)
    if math.isnan(value):
        return "-"
    other = OTHER_PUBLISHED.get((algorithm, game))
    return f"{value:g} ({other[3] if other else PAPER_ALGORITHM[algorithm][1]})"


def results(
    groups: dict[tuple[str, str], list[dict]],
) -> tuple[list[str], list[str], dict[str, tuple[str, list[Curves]]]]:
    """RESULTS' table rows, one per shipped preset and game of it (`result_games`), at its
    shipped settings (the records of no variant); the same rows, shorter, for the README;
    and the curves of the measured ones by file name, each with its heading."""
    rows: list[str] = []
    readme_rows: list[str] = []
    drawn: dict[str, tuple[str, list[Curves]]] = {}
    for preset in preset_names():
        config = shipped(preset)
        budget = config.run.total_env_steps
        for game in result_games(preset):
            env = f"`{game_env_id(preset, game)}`"
            reference = published_figure(config.algorithm.name, game)
            at, found = shipped_runs(groups.get((preset, game), []), budget)
            if not found:
                rows.append(
                    f"| `{preset}` | {env} | not measured yet | {acting(config)} | - | "
                    f"{budget:,} | - | - | - | {reference} | "
                    f"`{command(preset, [], [game], [0, 1, 2], budget)}` |"
                )
                readme_rows.append(
                    f"| `{preset}` | {config.algorithm.name.upper()} | {env} | not measured yet "
                    f"| - | {budget:,} | - | - | - |"
                )
                continue
            runs = [f for _, f in found]
            steps = min(f.env_steps for f in runs)
            reached = f"{steps:,}" if at == budget else short_of_budget(runs, budget)
            machines = sorted({r.get("machine") or "unknown" for r, _ in found})
            seeds = [r["seed"] for r, _ in found]
            returns = mean_std([f.final_eval for f in runs])
            wall = duration(statistics.mean(f.wall_s for f in runs))
            target = config.run.target_return
            to_target = time_to_target(found, target)
            if target is not None:
                to_target = f"{target:g}: {to_target}"
            rows.append(
                f"| `{preset}` | {env} | {returns} | {acting(config)} | {len(runs)} | "
                f"{reached} | {wall} | {to_target} | {'; '.join(machines)} | {reference} | "
                f"`{command(preset, [], [game], seeds, at)}` |"
            )
            hardware = "; ".join(dict.fromkeys(m.split(", torch")[0] for m in machines))
            readme_rows.append(
                f"| `{preset}` | {config.algorithm.name.upper()} | {env} | {returns} "
                f"({acting(config)}) | {len(runs)} | {reached} | {wall} | {to_target} | "
                f"{hardware} |"
            )
            limit = at * SLACK
            drawn[f"{preset}-{game}.png"] = (
                f"`{preset}` on {env}",
                [
                    curves_of(
                        f"seed {r['seed']}",
                        [m for m in expand(r["metrics"], METRICS) if m["env_steps"] <= limit],
                        [e for e in expand(r["evals"], EVALS) if e["env_steps"] <= limit],
                    )
                    for r, _ in found
                ],
            )
    return rows, readme_rows, drawn


def readme_with_presets(readme: str, rows: list[str]) -> str:
    """The README with its presets table (between README_MARKERS) made of `rows`."""
    start, end = README_MARKERS
    if readme.count(start) != 1 or readme.count(end) != 1:
        raise SystemExit(f"README.md: its presets table needs one {start} and one {end}")
    before, rest = readme.split(start)
    after = rest.split(end)[1]
    table = [
        "| preset | algorithm | env | return, mean ± std (acting) | seeds | env steps | "
        "wall time per seed | to the target return | hardware |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    return before + start + "\n" + "\n".join(table) + "\n" + end + after


def small_figure(curves: list[Curves]) -> Figure:
    """`draw_curves`' figure at about half its size (700 x 260 pixels), for RESULTS."""
    figure = draw_curves(curves)
    figure.set_size_inches(7, 2.6)
    for ax in figure.axes:
        ax.title.set_fontsize(7)
        ax.xaxis.label.set_fontsize(7)
        ax.yaxis.label.set_fontsize(7)
        ax.xaxis.get_offset_text().set_fontsize(6)
        ax.tick_params(labelsize=6)
        for line in ax.lines:
            line.set_linewidth(1)
            line.set_markersize(3)
        if legend := ax.get_legend():
            for text in legend.get_texts():
                text.set_fontsize(6)
    figure.tight_layout()
    return figure


def results_page(rows: list[str], drawn: dict[str, tuple[str, list[Curves]]]) -> list[str]:
    """RESULTS, for users: a short introduction, the table, the curves under it."""
    lines = [
        "# Results",
        "",
        "*This page is generated: `python bench/learning.py --report` rewrites it, and its",
        "curves in `docs/results/`, from the run records kept in `bench/learning_records/`.*",
        "",
        "What each shipped preset (`rayrl/configs/*.yaml`) learns with its shipped settings and",
        "budget (`run.total_env_steps`), on its own env; the MinAtar presets on SpaceInvaders",
        "too. Each row gives the command that trained its seeds, one after another, with the Ray",
        "runtime on the hardware named. A preset not measured yet shows the command that would",
        "measure it, at its budget.",
        "",
        f"- **return**: each seed's last checkpoint evaluated over {FINAL_EPISODES} episodes",
        "  (a run recorded before that evaluation was made: its last evaluation, over the",
        "  preset's `run.eval_episodes`), mean ± standard deviation across the seeds. The",
        "  *acting* column says how the policy acts in its evaluations (the preset's protocol).",
        "- **env steps**: a row whose runs stopped short of the preset's budget (a budget too",
        "  long for the hardware named) shows the env steps they reached, the preset's",
        "  budget, the time that budget would take a seed on that hardware (each seed's time",
        "  so far and the rest at its pace over its second half, past start-up and a replay's",
        "  warm-up) and that pace, each the mean over the seeds. A machine shared with another",
        "  run (*wall time*) makes both slower than alone. Pong's budgets and the MinAtar",
        "  paper's DQN are sized for a GPU learner: their rows on 2 CPUs are CPU figures,",
        "  their pace what a CPU gives (`docs/performance.md` times a GPU learner).",
        "- **wall time**: one seed's run, the mean over the seeds; a run may have shared its",
        "  machine with another.",
        "- **to target**: for a preset that ships a `run.target_return` (at which a user's run",
        "  stops; these runs went on to their budget), the median over the seeds that reached",
        "  it of the env steps and the wall time to their first evaluation at or above it, and",
        "  how many seeds reached it. The time is the run's clock from its process' start",
        "  (Ray's start-up included) to when it had trained on those env steps; the",
        "  evaluation itself ends a little later (`docs/performance.md` times whole commands).",
        "- **published**: the MinAtar paper's figure (Young & Tian 2019, Fig. 2) at 5M frames,",
        "  for the algorithm named. The paper reports training returns, with all 6 actions: a",
        "  guide, not the same measurement. For `mpe_spread_ppo`, MARLlib's IPPO after 20M env",
        "  steps (training returns, 4 seeds) on PettingZoo 1.12's simple_spread_v2, put on",
        f"  mpe2's v3 reward: v2 charged each agent {SPREAD_V2_SELF_COLLISION:g} an episode for",
        f"  colliding with itself ({MARLLIB_SPREAD_IPPO:g} there). For `halfcheetah_ppo`,",
        "  CleanRL's `ppo_continuous_action.py`, whose settings and network it copies, at 1M",
        "  env steps on HalfCheetah-v4 (training returns, the mean over its seeds).",
        "",
        "How the presets' settings were chosen (every variant tried, the rows measured before",
        "the records, and the reading of them all) is in `bench/reports/learning.md`, which the",
        "same command writes.",
        "",
        "| preset | env | return (mean ± std) | acting | seeds | env steps | wall time | "
        "to target | hardware | published | command |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        *protocols(),
    ]
    if drawn:
        lines += [
            "",
            "## Curves",
            "",
            "Training episode returns (left) and evaluation returns with their episodes'",
            "min-max band (right) against env steps, one color per seed.",
        ]
        for name, (heading, _) in drawn.items():
            lines += ["", f"### {heading}", "", f"![{Path(name).stem}](results/{name})"]
    return lines


def studies_page(
    groups: dict[tuple[str, str], list[dict]], drawn: dict[str, tuple[str, list[Curves]]]
) -> list[str]:
    """STUDIES: every preset and variant at every budget measured, the earlier rows, the
    commands, NOTES and the evaluation protocols."""
    made = table_rows(groups)
    earlier = earlier_rows(set(made))
    machines = sorted({r["machine"] for members in groups.values() for r in members})
    lines = [
        "> This is the study record of what the presets learn: every preset and variant",
        "> measured, at every budget, with the dated reading of them. It is generated:",
        "> `python bench/learning.py --report` rewrites it (and `docs/results.md`, the current",
        "> figure of each shipped preset) from the records in `bench/learning_records/`, with",
        "> `bench/learning_earlier.md` and `bench/learning_notes.md`: edit those, not this page.",
        "",
        "# Learning studies",
        "",
        "What the presets and their variants learn, beside published figures. Made by",
        "`bench/learning.py` (the commands are under the table); every run is the Ray runtime",
        "unless its variant sets `run.runtime=local`, on one machine",
        f"({'; '.join(machines) or machine()}). Returns are evaluation returns",
        "(`eval.jsonl`: the evaluation protocol of the preset) at the last evaluation (at the",
        f"end of a run, its last checkpoint on {FINAL_EPISODES} episodes), mean ±",
        "standard deviation across seeds, with the standard error of that mean (across seeds;",
        "for one seed, over its evaluation's episodes) and the worst seed's return, and the",
        "training return (the workers' last episodes, with their exploration) beside it; the",
        "published figures are training returns.",
        "",
        "| preset | game | seeds | env steps | evaluation return | s.e. | worst seed | "
        "training return | wall time | wall per 1M steps | learner busy | published | "
        "source, and how it differs | measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *made.values(),
        *earlier,
        "",
        f"gymnax-blines' PPO at 10M steps, for comparison: {GYMNAX_PPO} "
        "(no sticky actions, episodes cut at 1,000 steps, an MLP on the flattened grid).",
    ]
    for (variant, _), members in groups.items():
        settings = ", ".join(f"`{o}`" for o in members[0]["overrides"])
        line = f"`{variant}` is `{preset_of(variant)}` with {settings}."
        if settings and line not in lines:
            lines += ["", line]
    if groups:
        lines += ["", "The commands that made the rows with a record:", "", "```"]
        lines += [*commands(groups), "```"]
    if earlier:
        lines += ["", *earlier_text()]
    lines += [
        "",
        "Curves of the shipped presets' rows in `docs/results.md` (training episode returns and",
        "evaluations, one color per seed). The variants' curves are not drawn any more; until",
        "2026-12-06 every group's were, in `docs/learning/`, which git keeps: `git log",
        "--diff-filter=D -- docs/learning` names the commit that removed them, whose parent",
        "holds them.",
        "",
    ]
    lines += [
        f"![{Path(name).stem}]({Path(os.path.relpath(CURVES / name, STUDIES.parent)).as_posix()})"
        for name in drawn
    ]
    if NOTES.is_file():
        lines += ["", NOTES.read_text().rstrip()]
    lines += ["", "Each preset's evaluation protocol: `docs/results.md`."]
    return lines


def report(runs: Path) -> None:
    """Refresh the records of every run under `runs`, then rewrite RESULTS (and its curves)
    and STUDIES from all the records."""
    for path in sorted(runs.iterdir()) if runs.is_dir() else []:
        if RUN_NAME.fullmatch(path.name) and (path / "metrics.jsonl").is_file():
            evaluate_final(path)
            write_record(path)
    groups = read_records()
    for record in (r for members in groups.values() for r in members):
        if stale := stale_settings(record):
            raise SystemExit(
                f"bench/learning_records/{record['run']}.json: its run was trained with other "
                f"settings than `{record['variant']}` gives now ({'; '.join(stale)}); give the "
                "record (and its run's .variant.json) the overrides that name it, and another "
                "--label"
            )
    rows, readme_rows, drawn = results(groups)
    readme_text = readme_with_presets(README.read_text(), readme_rows)
    results_text = "\n".join(results_page(rows, drawn)) + "\n"
    studies_text = "\n".join(studies_page(groups, drawn)) + "\n"
    CURVES.mkdir(parents=True, exist_ok=True)
    for name, (_, curves) in drawn.items():
        save_png(small_figure(curves), CURVES / name)
    for png in CURVES.glob("*.png"):
        if png.name not in drawn:
            png.unlink()  # a row that is not shown any more
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(results_text)
    STUDIES.parent.mkdir(parents=True, exist_ok=True)
    STUDIES.write_text(studies_text)
    README.write_text(readme_text)
    print(f"wrote {RESULTS}, its curves in {CURVES}, {STUDIES} and the presets of {README}")


def check_label(label: str | None, overrides: list[str]) -> None:
    """A variant needs a label, and a label names one set of overrides throughout."""
    if overrides and not label:
        raise SystemExit("--set needs --label: the name of this variant in the table")
    if label and not overrides:
        raise SystemExit(f"--label {label} names no variant: give its --set overrides")
    if label and not re.fullmatch(r"[A-Za-z0-9_]+", label):
        raise SystemExit(f"--label {label!r}: use letters, digits and '_' only")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n" + __doc__.rstrip().rsplit("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--preset",
        choices=preset_names(),
        help="the shipped preset to train (any of rayrl/configs/*.yaml)",
    )
    parser.add_argument("--label", help="name of the variant that --set makes")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override of the variant",
    )
    parser.add_argument(
        "--games",
        nargs="+",
        help="MinAtar games for a MinAtar preset (default: "
        f"{' '.join(MINATAR_GAMES)}); a preset of another family trains on its own env, "
        "and needs none",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--env-steps",
        type=int,
        help="the budget of each run (default: 1000000 for a MinAtar preset, the preset's "
        "run.total_env_steps for another)",
    )
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument(
        "--report",
        action="store_true",
        help="train nothing: evaluate the finished runs under --runs that have no final "
        "evaluation yet, and rewrite docs/results.md (with its curves in docs/results/) "
        "and bench/reports/learning.md from the records",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not args.report:
        if args.preset is None:
            parser.error("--preset is needed to train")
        check_label(args.label, args.overrides)
        variant = variant_name(args.preset, args.label)
        games = games_of(args.preset, args.games)
        env_steps = args.env_steps or (
            1_000_000 if is_minatar(args.preset) else shipped(args.preset).run.total_env_steps
        )
        for game in games:
            for seed in args.seeds:
                start = time.monotonic()
                path = train(args.runs, variant, args.overrides, game, seed, env_steps)
                evaluate_final(path)
                write_record(path)
                print(f"{variant} {game} seed {seed}: {time.monotonic() - start:.0f} s")
    report(args.runs)


if __name__ == "__main__":
    main()
