"""Learning you can check: presets trained on MinAtar games over seeds, beside published
figures, written to docs/learning.md with the curves.

Runs one (preset, game, seed) at a time with the Ray runtime, each in its own run directory
under --runs (default bench/results/learning), so that a table can grow across sittings: a
run that was stopped resumes from its last checkpoint (`--resume`), one that reached its
budget is skipped, and a larger budget continues it (unless the preset decays its learning
rate over the budget, as minatar_impala does: then a longer budget needs another seed).
Every call rewrites docs/learning.md from all the runs there, with bench/learning_notes.md
(the reading of the table) under it.

    python bench/learning.py --preset minatar_dqn --games Breakout SpaceInvaders \
        --seeds 0 1 2 --env-steps 1000000
    python bench/learning.py --preset minatar_ppo --games Breakout --seeds 0 --env-steps 5000000
    python bench/learning.py --report        # only rewrite docs/learning.md
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from common import machine

import rayrl
from rayrl.config import preset_names
from rayrl.plot import plot_runs
from rayrl.presets import load_config
from rayrl.rundir import RunDirectory

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "bench" / "results" / "learning"
DOC = ROOT / "docs" / "learning.md"
CURVES = ROOT / "docs" / "learning"
NOTES = ROOT / "bench" / "learning_notes.md"
"""The hand-written reading of the table (targets met or missed, by how much, and why),
placed under it in docs/learning.md."""

PAPER = "MinAtar paper (Young & Tian 2019, Fig. 2), 5M frames"
GYMNAX = "gymnax README's PPO table (gymnax-blines), 10M steps"
PUBLISHED: dict[tuple[str, str], tuple[float, str, str]] = {
    # (algorithm, game): (return, source, how its protocol differs from ours)
    ("dqn", "Breakout"): (10.0, PAPER, "DQN; training returns; all 6 actions"),
    ("dqn", "SpaceInvaders"): (43.0, PAPER, "DQN; training returns; all 6 actions"),
    ("impala", "Breakout"): (17.0, PAPER, "AC(lambda), not IMPALA; training returns; 6 actions"),
    ("impala", "SpaceInvaders"): (185.0, PAPER, "AC(lambda), not IMPALA; training returns"),
    ("ppo", "Breakout"): (17.0, PAPER, "AC(lambda); training returns; 6 actions"),
    ("ppo", "SpaceInvaders"): (185.0, PAPER, "AC(lambda); training returns; 6 actions"),
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


def run_dir(runs: Path, preset: str, game: str, seed: int) -> Path:
    return runs / f"{preset}-{game}-s{seed}"


def train(runs: Path, preset: str, game: str, seed: int, env_steps: int) -> None:
    """Train (or continue) one run to `env_steps`."""
    path = run_dir(runs, preset, game, seed)
    budget = [f"run.total_env_steps={env_steps}", "run.target_return=null"]
    latest = path / "checkpoints" / "latest.pt"
    if latest.is_file():
        done = steps_reached(path)
        if done >= env_steps:
            print(f"{path.name}: {done:,} env steps already, skipped", flush=True)
            return
        saved = RunDirectory.open(path).raw_config()
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
        preset,
        overrides=[
            f"env.id=MinAtar/{game}-v1",
            f"run.seed={seed}",
            f"run.runs_dir={runs}",
            f"run.name={path.name}",
            "logging.console=false",
            *budget,
        ],
    )


def rows(path: Path, name: str) -> list[dict]:
    file = path / name
    if not file.is_file():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


def steps_reached(path: Path) -> int:
    return max((r["env_steps"] for r in rows(path, "metrics.jsonl")), default=0)


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


def figures(path: Path, seed: int, budget: int) -> RunFigures | None:
    """The run's figures up to `budget` env steps (its evaluation there, not a later one),
    or None if it has not reached it, or if its learning rate decays over a longer budget
    (at `budget` it was not trained the way a run of that budget is)."""
    saved = RunDirectory.open(path).raw_config()
    if saved["algorithm"].get("lr_decay") and saved["run"]["total_env_steps"] > budget * SLACK:
        return None
    limit = budget * SLACK
    metrics = [r for r in rows(path, "metrics.jsonl") if r["env_steps"] <= limit]
    evals = [r for r in rows(path, "eval.jsonl") if r["env_steps"] <= limit]
    if not evals or evals[-1]["env_steps"] < budget / SLACK:
        return None
    training = [r["worker/episode_return"] for r in metrics if "worker/episode_return" in r]
    utilization = [r["learner/utilization"] for r in metrics if "learner/utilization" in r]
    return RunFigures(
        seed=seed,
        env_steps=evals[-1]["env_steps"],
        wall_s=max(r.get("run/wall_s", 0.0) for r in metrics),
        final_eval=evals[-1]["eval/return_mean"],
        final_training=statistics.mean(training[-10:]) if training else float("nan"),
        learner_share=statistics.mean(utilization) if utilization else float("nan"),
    )


def mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def report(runs: Path) -> None:
    """Rewrite docs/learning.md (and its curves) from every run under `runs`."""
    groups: dict[tuple[str, str], list[tuple[Path, int]]] = {}
    for path in sorted(runs.glob("*-s*")):
        preset, game, seed = path.name.rsplit("-", 2)
        groups.setdefault((preset, game), []).append((path, int(seed[1:])))
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
        "wall time | wall per 1M steps | learner busy | published | source, and how it differs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (preset, game), members in sorted(groups.items()):
        algorithm = preset.split("_")[-1]
        published, source, differs = PUBLISHED.get((algorithm, game), (float("nan"), "-", "-"))
        # a row at 1M env steps (every seed) and one at the longest budget any seed reached
        longest = max(steps_reached(path) for path, _ in members)
        budgets = sorted({b for b in (1_000_000, round(longest, -5)) if b <= longest * SLACK})
        for budget in budgets:
            found = [f for path, seed in members if (f := figures(path, seed, budget))]
            if not found:
                continue
            steps = min(f.env_steps for f in found)
            wall = statistics.mean(f.wall_s for f in found)
            lines.append(
                f"| `{preset}` | {game} | {len(found)} | {steps:,} | "
                f"{mean_std([f.final_eval for f in found])} | "
                f"{mean_std([f.final_training for f in found])} | {wall / 60:.0f} min | "
                f"{wall / 60 / (steps / 1e6):.1f} min | "
                f"{100 * statistics.mean(f.learner_share for f in found):.0f}% | "
                f"{published:g} | {source}: {differs} |"
            )
        picture = CURVES / f"{preset}-{game}.png"
        plot_runs([path for path, _ in members], picture)
    lines += [
        "",
        f"gymnax-blines' PPO at 10M steps, for comparison: {GYMNAX_PPO} "
        "(no sticky actions, episodes cut at 1,000 steps, an MLP on the flattened grid).",
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["minatar_dqn", "minatar_impala", "minatar_ppo"])
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
        for game in args.games:
            for seed in args.seeds:
                start = time.monotonic()
                train(args.runs, args.preset, game, seed, args.env_steps)
                print(f"{args.preset} {game} seed {seed}: {time.monotonic() - start:.0f} s")
    report(args.runs)


if __name__ == "__main__":
    main()
