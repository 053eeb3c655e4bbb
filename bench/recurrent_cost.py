"""What memory costs: a recurrent preset's run beside its feed-forward twin's, side by side.

Each round runs both presets (`rayrl.train`, the Ray runtime, in this process; the order
alternates from round to round, since the machine drifts) for the same env steps, with the
target and periodic evaluations off, and reads the run's own figures: env steps per second
over the run, learner updates per second and the share of the learner's time spent
updating, and the share of the workers' time spent in the policy (act) against the env
(step). The ratio recurrent / feed-forward is taken within each round.

    python bench/recurrent_cost.py --presets minatar_impala minatar_impala_lstm \\
        --env-steps 300000 --repeats 3
"""

from __future__ import annotations

import argparse
import logging
import tempfile

from common import machine, median_range

import rayrl


def run(preset: str, env_steps: int, seed: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as runs:
        result = rayrl.train(
            preset,
            overrides=[
                "logging.console=false",
                f"run.runs_dir={runs}",
                f"run.seed={seed}",
                f"run.total_env_steps={env_steps}",
                "run.target_return=null",
                f"run.eval_interval_env_steps={10 * env_steps}",
                "run.eval_episodes=1",
                f"run.checkpoint_interval_env_steps={10 * env_steps}",
            ],
        )
    return result.headline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs=2, default=["minatar_impala", "minatar_impala_lstm"])
    parser.add_argument("--env-steps", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    feedforward, recurrent = args.presets
    rows: dict[str, list[dict[str, float]]] = {feedforward: [], recurrent: []}
    for round_ in range(args.repeats):
        order = [feedforward, recurrent] if round_ % 2 == 0 else [recurrent, feedforward]
        for preset in order:
            figures = run(preset, args.env_steps, seed=round_)
            rows[preset].append(figures)
            print(
                f"round {round_} {preset}: {figures['env_steps_per_s']:,.0f} env steps/s, "
                f"{figures['learner_updates_per_s']:.1f} updates/s",
                flush=True,
            )
    print(f"\n{machine()}; {args.env_steps:,} env steps per run, {args.repeats} rounds")
    print("| preset | env steps/s | learner updates/s | learner busy |")
    print("|---|---|---|---|")
    for preset, figures in rows.items():
        busy = [100 * f["learner_utilization"] for f in figures]
        print(
            f"| {preset} | {median_range([f['env_steps_per_s'] for f in figures], '{:,.0f}')} "
            f"| {median_range([f['learner_updates_per_s'] for f in figures])} "
            f"| {median_range(busy, '{:.0f}')}% |"
        )
    for name, key in (("env steps/s", "env_steps_per_s"), ("updates/s", "learner_updates_per_s")):
        ratios = [r[key] / f[key] for f, r in zip(rows[feedforward], rows[recurrent], strict=True)]
        print(f"{recurrent} / {feedforward} {name}, per round: {median_range(ratios, '{:.2f}')}x")


if __name__ == "__main__":
    main()
