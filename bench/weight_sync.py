"""Weight-sync latency: from the learner's publication of new Nature-CNN weights (about 1.7M
parameters, 6.7 MB) to each worker acting with them, with N workers on one node.

A real `rayrl.train` run of the pong_dqn preset whose learner publishes after every update.
Each worker reports, for every version it picks up, the time from publication to the env
step at which it first acts with it (a version overtaken by a newer one before a worker
picks it up is not counted for that worker). Also reports policy lag (learner version minus
the oldest version that produced a chunk's transitions).

    python bench/weight_sync.py --workers 4 --seconds 60 --repeats 3
"""

from __future__ import annotations

import argparse
import logging
import tempfile

from common import machine, median_range


def run(workers: int, seconds: float) -> dict[str, float]:
    import rayrl

    with tempfile.TemporaryDirectory() as runs:
        result = rayrl.train(
            "pong_dqn",
            overrides=[
                "logging.console=false",
                f"run.runs_dir={runs}",
                f"run.time_budget_s={seconds}",
                "run.total_env_steps=100000000",
                "run.eval_interval_env_steps=100000000",
                "run.eval_episodes=1",
                "run.checkpoint_interval_env_steps=100000000",
                f"workers.num_workers={workers}",
                "workers.cpus_per_worker=0.5",
                "algorithm.replay.capacity=100000",
                "algorithm.replay.min_size=2048",
                "algorithm.replay.samples_per_insert=0.05",
                "learner.batch_size=32",
                "learner.batches_per_request=1",
                "learner.sync_interval=1",
            ],
        )
    return result.headline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    runs = [run(args.workers, args.seconds) for _ in range(args.repeats)]
    print(
        f"Nature CNN, {args.workers} workers on one node, {machine()}; median (min-max) of "
        f"{args.repeats} runs of {args.seconds:.0f} s:"
    )
    for key, label in (
        ("sync_latency_ms_p50", "weight sync p50 (ms)"),
        ("sync_latency_ms_p95", "weight sync p95 (ms)"),
        ("syncs", "syncs measured"),
        ("policy_lag_p50", "policy lag p50 (updates)"),
        ("policy_lag_max", "policy lag max (updates)"),
        ("learner_updates_per_s", "learner updates/s"),
    ):
        print(f"  {label:>26}: {median_range([r[key] for r in runs], '{:,.1f}')}")


if __name__ == "__main__":
    main()
