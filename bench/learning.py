"""Learning you can check: presets trained on MinAtar games over seeds, beside published
figures, written to docs/learning.md with the curves.

Runs one (preset, game, seed) at a time with the Ray runtime, each in its own run directory
under --runs (default bench/results/learning, not committed), so that a table can grow
across sittings: a run that was stopped resumes from its last checkpoint, one that reached
its budget is skipped, and a larger budget continues it (unless the preset decays its
learning rate over the budget, as minatar_impala does: then a longer budget needs another
seed). A variant of a preset is named with --label and its --set overrides, and gets its
own rows.

The run directories (checkpoints, replay) stay on the machine that ran them; what the table
and the curves need of each run (its evaluations, its training returns, wall time and the
learner's busy share, per log row) is kept in bench/learning_records/<run>.json, which is
committed, so the table made on a later machine still holds every earlier run. Rows
measured before the records existed are kept verbatim in bench/learning_earlier.md. Every
call rewrites docs/learning.md from the records, with bench/learning_notes.md (the reading
of the table) under it.

    python bench/learning.py --preset minatar_ppo --games Breakout --seeds 0 --env-steps 5000000
    python bench/learning.py --preset minatar_dqn --label spi8 \
        --set algorithm.replay.samples_per_insert=8 --set algorithm.target_update_every=250 \
        --games Breakout SpaceInvaders --seeds 0 1 2 --env-steps 1000000
    python bench/learning.py --report        # only rewrite docs/learning.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from common import machine

import rayrl
from rayrl.config import preset_names
from rayrl.plot import Curves, draw_curves, save_png
from rayrl.presets import load_config
from rayrl.rundir import RunDirectory

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "bench" / "results" / "learning"
DOC = ROOT / "docs" / "learning.md"
CURVES = ROOT / "docs" / "learning"
RECORDS = ROOT / "bench" / "learning_records"
"""One JSON file per run: what the table and the curves need of it (committed)."""
EARLIER = ROOT / "bench" / "learning_earlier.md"
"""Table rows measured before the records existed (their runs were on a machine that is
gone), kept verbatim for the (preset, game) groups that have no records."""
NOTES = ROOT / "bench" / "learning_notes.md"
"""The hand-written reading of the table (targets met or missed, by how much, and why),
placed under it in docs/learning.md."""

PAPER = "MinAtar paper (Young & Tian 2019, Fig. 2), 5M frames"
GYMNAX = "gymnax README's PPO table (gymnax-blines), 10M steps"
PUBLISHED: dict[tuple[str, str], tuple[float, str, str]] = {
    # (algorithm, game): (return, source, how its protocol differs from ours); the paper acts
    # with all 6 actions, -v1 ids with the minimal set (Breakout 3, SpaceInvaders 4)
    ("dqn", "Breakout"): (10.0, PAPER, "DQN; training returns; 6 actions, ours 3"),
    ("dqn", "SpaceInvaders"): (43.0, PAPER, "DQN; training returns; 6 actions, ours 4"),
    ("impala", "Breakout"): (
        17.0,
        PAPER,
        "AC(lambda), not IMPALA; training returns; 6 actions, ours 3",
    ),
    ("impala", "SpaceInvaders"): (
        185.0,
        PAPER,
        "AC(lambda), not IMPALA; training returns; 6 actions, ours 4",
    ),
    ("ppo", "Breakout"): (17.0, PAPER, "AC(lambda); training returns; 6 actions, ours 3"),
    ("ppo", "SpaceInvaders"): (185.0, PAPER, "AC(lambda); training returns; 6 actions, ours 4"),
}
GYMNAX_PPO = {"Breakout": 28.0, "SpaceInvaders": 131.0, "Asterix": 15.0, "Freeway": 58.0}
"""gymnax-blines' PPO at 10M steps: no sticky actions, minimal action set, episodes cut at
1,000 steps (Freeway 2,500), an MLP on the flattened grid."""


FOLLOWS = {
    "cartpole_dqn": "the CartPole protocol (mean of 10 greedy episodes, 475 solves it)",
    "cartpole_impala": "the CartPole protocol",
    "cartpole_ppo": "the CartPole protocol",
    "pong_dqn": "Nature DQN (30 episodes, epsilon 0.05, up to 30 no-ops; cap 30 min, not 5)",
    "pong_impala": "the IMPALA paper (the policy's samples)",
    "pong_ppo": "the PPO paper and CleanRL (the policy's samples)",
    "minatar_dqn": "Nature DQN's epsilon 0.05 (the MinAtar paper reports training returns)",
    "minatar_impala": "the policy's samples (the MinAtar paper reports training returns)",
    "minatar_ppo": "the policy's samples, as gymnax-blines evaluates",
}
"""Which published evaluation protocol each preset follows."""


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
        config = load_config(name)
        algo, env = config.algorithm, config.env
        if hasattr(algo, "eval_epsilon"):
            acting = f"epsilon-greedy, {algo.eval_epsilon:g}"
        else:
            acting = {"sample": "sampled", "greedy": "greedy"}[algo.eval_policy]
        signal = ", ".join(
            text
            for on, text in ((env.clip_rewards, "clipped"), (env.terminal_on_life_loss, "life"))
            if on
        )
        lines.append(
            f"| `{name}` | {acting} | {config.run.eval_episodes} | "
            f"{env.repeat_action_probability:g} | {signal or 'raw rewards'} | "
            f"{FOLLOWS.get(name, '-')} |"
        )
    return lines


def run_name(variant: str, game: str, seed: int) -> str:
    return f"{variant}-{game}-s{seed}"


def variant_name(preset: str, label: str | None) -> str:
    """The preset, or the preset and the label of its variant ("minatar_dqn+spi8")."""
    return f"{preset}+{label}" if label else preset


def train(
    runs: Path, variant: str, overrides: list[str], game: str, seed: int, env_steps: int
) -> None:
    """Train (or continue) one run of `variant` (a preset and its `overrides`) to
    `env_steps`."""
    path = runs / run_name(variant, game, seed)
    budget = [f"run.total_env_steps={env_steps}", "run.target_return=null"]
    latest = path / "checkpoints" / "latest.pt"
    if latest.is_file():
        saved = RunDirectory.open(path).raw_config()
        done = max((row[0] for row in metric_rows(path)), default=0)
        if done >= env_steps:
            print(f"{path.name}: {done:,} env steps already, skipped", flush=True)
            return
        if saved["algorithm"].get("lr_decay") and saved["run"]["total_env_steps"] < env_steps:
            raise SystemExit(
                f"{path.name}: its learning rate decays to zero over its budget of "
                f"{saved['run']['total_env_steps']:,} env steps (algorithm.lr_decay), so a "
                f"longer one would raise it again mid-run; run another seed to {env_steps:,}"
            )
        print(f"{path.name}: resuming at {done:,} env steps", flush=True)
        rayrl.train(resume=path, overrides=budget)
        return
    rayrl.train(
        variant.split("+")[0],
        overrides=[
            *overrides,
            f"env.id=MinAtar/{game}-v1",
            f"run.seed={seed}",
            f"run.runs_dir={runs}",
            f"run.name={path.name}",
            "logging.console=false",
            *budget,
        ],
    )


def jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rounded(value: float | None) -> float | None:
    """Four significant digits (a record stays small), None for a missing or non-finite
    value."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.4g}")


def metric_rows(path: Path) -> list[list]:
    """[env_steps, wall_s, training return or None, learner busy share or None] per log
    row of the run in `path`."""
    return [
        [
            r["env_steps"],
            rounded(r.get("run/wall_s")),
            rounded(r.get("worker/episode_return")),
            rounded(r.get("learner/utilization")),
        ]
        for r in jsonl(path / "metrics.jsonl")
    ]


def write_record(path: Path, overrides: list[str] | None = None) -> None:
    """Keep what the table needs of the run in `path` in RECORDS (replacing an older
    record of it)."""
    variant, game, seed = path.name.rsplit("-", 2)
    saved = RunDirectory.open(path).raw_config()
    evals = [
        [r["env_steps"], *(rounded(r[f"eval/return_{k}"]) for k in ("mean", "min", "max"))]
        for r in jsonl(path / "eval.jsonl")
    ]
    metrics_file = path / "metrics.jsonl"
    measured = datetime.date.fromtimestamp(metrics_file.stat().st_mtime).isoformat()
    old = RECORDS / f"{path.name}.json"
    if overrides is None and old.is_file():
        overrides = json.loads(old.read_text())["overrides"]
    record = {
        "run": path.name,
        "variant": variant,
        "overrides": overrides or [],
        "game": game,
        "seed": int(seed[1:]),
        "planned_env_steps": saved["run"]["total_env_steps"],
        "lr_decay": bool(saved["algorithm"].get("lr_decay")),
        "machine": machine(),
        "measured": measured,
        "evals": evals,
        "metrics": metric_rows(path),
    }
    RECORDS.mkdir(parents=True, exist_ok=True)
    old.write_text(json.dumps(record, separators=(",", ":")) + "\n")


@dataclass
class RunFigures:
    seed: int
    env_steps: int
    wall_s: float
    final_eval: float
    final_training: float
    learner_share: float
    """Fraction of the run's wall time its learner spent in optimization steps."""


SLACK = 1.01
"""A run "reached" a budget within 1%: runs stop on whole chunks and evaluations come at
the first log after an interval, a little past the round number."""


def figures(record: dict, budget: int) -> RunFigures | None:
    """The run's figures up to `budget` env steps (its evaluation there, not a later one),
    or None if it has not reached it, or if its learning rate decays over a longer budget
    (at `budget` it was not trained the way a run of that budget is)."""
    if record["lr_decay"] and record["planned_env_steps"] > budget * SLACK:
        return None
    limit = budget * SLACK
    metrics = [row for row in record["metrics"] if row[0] <= limit]
    evals = [row for row in record["evals"] if row[0] <= limit]
    if not evals or evals[-1][0] < budget / SLACK:
        return None
    training = [row[2] for row in metrics if row[2] is not None]
    utilization = [row[3] for row in metrics if row[3] is not None]
    return RunFigures(
        seed=record["seed"],
        env_steps=evals[-1][0],
        wall_s=max((row[1] or 0.0) for row in metrics),
        final_eval=evals[-1][1],
        final_training=statistics.mean(training[-10:]) if training else float("nan"),
        learner_share=statistics.mean(utilization) if utilization else float("nan"),
    )


def curves(record: dict) -> Curves:
    """The record's learning curves, as `rayrl plot` draws a run's."""
    train = [row for row in record["metrics"] if row[2] is not None]
    nan = float("nan")
    return Curves(
        label=record["run"],
        train_steps=[row[0] for row in train],
        train_returns=[row[2] for row in train],
        eval_steps=[row[0] for row in record["evals"]],
        eval_means=[nan if row[1] is None else row[1] for row in record["evals"]],
        eval_mins=[nan if row[2] is None else row[2] for row in record["evals"]],
        eval_maxs=[nan if row[3] is None else row[3] for row in record["evals"]],
    )


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


def earlier_rows(skip: set[tuple[str, str]]) -> list[str]:
    """The rows of bench/learning_earlier.md whose (preset, game) group has no records."""
    kept = []
    for line in EARLIER.read_text().splitlines() if EARLIER.is_file() else []:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| `") and (cells[0].strip("`"), cells[1]) not in skip:
            kept.append(line)
    return kept


def commands(groups: dict[tuple[str, str], list[dict]]) -> list[str]:
    """The `bench/learning.py` commands that train the recorded runs, one per variant and
    budget (the games and seeds trained to it)."""
    made: dict[tuple[str, int], tuple[list[str], set[str], set[int]]] = {}
    for (variant, game), members in groups.items():
        for record in members:
            key = (variant, record["planned_env_steps"])
            entry = made.setdefault(key, (record["overrides"], set(), set()))
            entry[1].add(game)
            entry[2].add(record["seed"])
    lines = []
    for (variant, budget), (overrides, games, seeds) in sorted(made.items()):
        preset, _, label = variant.partition("+")
        variant_args = f" --label {label}" if label else ""
        variant_args += "".join(f" --set {o}" for o in overrides)
        lines.append(
            f"python bench/learning.py --preset {preset}{variant_args} "
            f"--games {' '.join(sorted(games))} --seeds {' '.join(map(str, sorted(seeds)))} "
            f"--env-steps {budget}"
        )
    return lines


def report(runs: Path) -> None:
    """Refresh the records of every run under `runs`, then rewrite docs/learning.md (and
    the curves of every group with records) from all the records."""
    for path in sorted(runs.glob("*-s*")):
        if (path / "metrics.jsonl").is_file():
            write_record(path)
    groups = read_records()
    CURVES.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Learning results",
        "",
        "What the presets learn on MinAtar, beside published figures. Made by",
        "`bench/learning.py` (its docstring has the commands); every run is the Ray runtime on",
        f"this machine: {machine()}. Returns are evaluation returns (`eval.jsonl`: the",
        "evaluation protocol of the preset) at the last evaluation, mean ± standard deviation",
        "across seeds, and the training return (the workers' last episodes, with their",
        "exploration) beside it; the published figures are training returns.",
        "",
        "| preset | game | seeds | env steps | evaluation return | training return | "
        "wall time | wall per 1M steps | learner busy | published | source, and how it differs "
        "| measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    variants: dict[str, list[str]] = {}
    for (variant, game), members in groups.items():
        variants[variant] = members[0]["overrides"]
        algorithm = variant.split("+")[0].split("_")[-1]
        published, source, differs = PUBLISHED.get((algorithm, game), (float("nan"), "-", "-"))
        # a row at 1M env steps (every seed) and one at the longest budget any seed reached
        longest = max((row[0] for r in members for row in r["metrics"]), default=0)
        budgets = sorted({b for b in (1_000_000, round(longest, -5)) if b <= longest * SLACK})
        for budget in budgets:
            found = [f for record in members if (f := figures(record, budget))]
            if not found:
                continue
            steps = min(f.env_steps for f in found)
            wall = statistics.mean(f.wall_s for f in found)
            lines.append(
                f"| `{variant}` | {game} | {len(found)} | {steps:,} | "
                f"{mean_std([f.final_eval for f in found])} | "
                f"{mean_std([f.final_training for f in found])} | {wall / 60:.0f} min | "
                f"{wall / 60 / (steps / 1e6):.1f} min | "
                f"{100 * statistics.mean(f.learner_share for f in found):.0f}% | "
                f"{published:g} | {source}: {differs} | "
                f"{max(r['measured'] for r in members)} |"
            )
        figure = draw_curves([curves(record) for record in members])
        save_png(figure, CURVES / f"{variant}-{game}.png")
    earlier = earlier_rows(set(groups))
    lines += earlier
    lines += [
        "",
        f"gymnax-blines' PPO at 10M steps, for comparison: {GYMNAX_PPO} "
        "(no sticky actions, episodes cut at 1,000 steps, an MLP on the flattened grid).",
    ]
    for variant, overrides in variants.items():
        if overrides:
            settings = ", ".join(f"`{o}`" for o in overrides)
            lines += ["", f"`{variant}` is `{variant.split('+')[0]}` with {settings}."]
    lines += ["", "The commands that made the rows with a record:", "", "```", *commands(groups)]
    lines += ["```"]
    if earlier:
        lines += ["", *EARLIER.read_text().split("\n\n")[1:2]]  # how those rows were made
    lines += [
        "",
        "Curves (training episode returns and evaluations, one color per seed):",
        "",
    ]
    lines += [f"![{p.stem}](learning/{p.name})" for p in sorted(CURVES.glob("*.png"))]
    if NOTES.is_file():
        lines += ["", NOTES.read_text().rstrip()]
    lines += ["", *protocols()]
    DOC.write_text("\n".join(lines) + "\n")
    print(f"wrote {DOC}")


def check_label(label: str | None, overrides: list[str]) -> None:
    """A variant needs a label, and a label names one set of overrides throughout."""
    if overrides and not label:
        raise SystemExit("--set needs --label: the name of this variant in the table")
    if label and not overrides:
        raise SystemExit(f"--label {label} names no variant: give its --set overrides")
    if label and ("-" in label or "+" in label):
        raise SystemExit(f"--label {label}: use letters, digits and '_' only")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["minatar_dqn", "minatar_impala", "minatar_ppo"])
    parser.add_argument("--label", help="name of the variant that --set makes")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override of the variant",
    )
    parser.add_argument("--games", nargs="+", default=["Breakout", "SpaceInvaders"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--env-steps", type=int, default=1_000_000)
    parser.add_argument("--runs", type=Path, default=RUNS)
    parser.add_argument("--report", action="store_true", help="only rewrite docs/learning.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not args.report:
        if args.preset is None:
            parser.error("--preset is needed to train")
        check_label(args.label, args.overrides)
        variant = variant_name(args.preset, args.label)
        for game in args.games:
            for seed in args.seeds:
                start = time.monotonic()
                train(args.runs, variant, args.overrides, game, seed, args.env_steps)
                write_record(args.runs / run_name(variant, game, seed), args.overrides)
                print(f"{variant} {game} seed {seed}: {time.monotonic() - start:.0f} s")
    report(args.runs)


if __name__ == "__main__":
    main()
