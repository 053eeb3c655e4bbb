"""The learner's updates/s inside a real run, against a bare torch loop of the same network,
batch and optimizer on the same machine, side by side.

Three figures per round, so that the machine's drift hits all three alike (bare and
in-process timed in turn in half-second windows):
- **bare**: a plain single-threaded torch loop written here, what the hardware allows: the
  preset's network (its MLP, or for `network: minatar_cnn` the plain loop's MinAtar network,
  `bench/plain_dqn.py`), batch size and targets (double Q or not), Huber loss, gradient
  clipping when the preset clips, and its optimizer as a user writes it (fused Adam; RMSprop
  with torch's defaults, its per-tensor loop on a CPU), the target network copied on the
  preset's schedule;
- **in-process**: rayrl's own DQN learner (`update` on numpy batches, as it gets them from
  the replay) in this process, no Ray: what rayrl's update code costs over the bare loop;
  both train on the same batches of the preset's env played at random (`played_batches`);
- **run**: the preset's `rayrl.train` run (as a user runs it, Ray runtime; `--set` shortens
  a long one), its learner's rate while it trains: updates between the first and the last
  metrics row with updates, over the time between them.

The run's rate is an average over the run, on a machine whose speed drifts by tens of
percent from one second to the next; it is compared with the bare loop's average over its
windows (`Rate.mean`). The best window (`Rate.best`, timeit's minimum) is printed too: the
code's cost, but no fair yardstick for an average.

    python bench/learner_rate.py --repeats 3
    python bench/learner_rate.py --preset minatar_dqn --set run.total_env_steps=15000
"""

from __future__ import annotations

import argparse
import itertools
import logging
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from common import machine, median_range, read_metrics
from plain_dqn import QNetwork
from torch import nn
from torch.nn import functional as F
from torch.optim import Optimizer

from rayrl.algorithms import ALGORITHMS
from rayrl.config import Config, LearnerConfig
from rayrl.core import TransitionBatch
from rayrl.envs import env_spec, make_env
from rayrl.envs.spec import EnvSpec
from rayrl.presets import load_config

WINDOW_S = 0.5
"""How long each timing window of `interleaved_rates` lasts."""


def bare_network(config: Config, spec: EnvSpec) -> nn.Module:
    """The preset's Q-network, written plainly: its MLP, or the plain loop's MinAtar one."""
    actions = int(spec.action_space.n)
    if config.algorithm.network == "minatar_cnn":
        return QNetwork(spec.observation_space.shape[-1], actions)
    sizes = [int(np.prod(spec.observation_space.shape)), *config.algorithm.hidden_sizes]
    layers: list[nn.Module] = []
    for inputs, outputs in itertools.pairwise(sizes):
        layers += [nn.Linear(inputs, outputs), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-1], actions))


def bare_optimizer(parameters: Iterator[nn.Parameter], settings: LearnerConfig) -> Optimizer:
    """The preset's optimizer as a user writes it: torch's defaults beside its settings."""
    if settings.optimizer == "rmsprop":
        return torch.optim.RMSprop(
            parameters,
            lr=settings.lr,
            alpha=settings.rmsprop_alpha,
            eps=settings.optimizer_eps,
            centered=settings.rmsprop_centered,
        )
    return torch.optim.Adam(parameters, lr=settings.lr, eps=settings.optimizer_eps, fused=True)


BATCHES = 256
"""Distinct batches each update cycles through (8,192 transitions at batch 32)."""


def played_batches(config: Config, count: int = BATCHES) -> list[TransitionBatch]:
    """`count` batches of transitions the preset's env gave under uniformly random actions
    (8 envs, seeded), as the replay serves them: real observations (MinAtar's sparse
    grids), rewards and terminals, one-step (a preset's n-step returns are not formed: the
    update's cost does not depend on them), discounted by gamma. Every update gets a
    batch it has not seen for `count` updates and its target network moves on the preset's
    schedule, so the loss stays away from 0. Trained over and over on one fixed batch, a
    Q-network fits it (the bare MinAtar loop's loss was 1e-10 after 1,000 updates and NaN
    after 3,000), and the timer then times a degenerate update: NaN arithmetic, or rayrl's
    guard skipping the optimizer step on a non-finite gradient."""
    size, num_envs = config.learner.batch_size, 8
    env = make_env(config.env, num_envs, training=True)
    rng = np.random.default_rng(0)
    steps = []
    try:
        env.reset(seed=0)
        for _ in range(-(-count * size // num_envs)):
            actions = rng.integers(0, env.single_action_space.n, num_envs)
            steps.append(env.step(actions))
    finally:
        env.close()
    order = rng.permutation(count * size)

    def stacked(name: str) -> np.ndarray:
        return np.concatenate([getattr(step, name) for step in steps])[order]

    gamma = np.float32(config.algorithm.gamma)
    discounts = np.where(stacked("terminated"), np.float32(0.0), gamma).astype(np.float32)
    obs, actions, rewards, next_obs = (
        stacked(name) for name in ("obs", "actions", "rewards", "next_obs")
    )
    return [
        TransitionBatch(
            obs=obs[part],
            actions=actions[part].astype(np.int64),
            rewards=rewards[part],
            discounts=discounts[part],
            next_obs=next_obs[part],
            weights=np.ones(size, np.float32),
            indices=np.arange(size, dtype=np.int64),
        )
        for part in (slice(i * size, (i + 1) * size) for i in range(count))
    ]


def bare_update(config: Config, batches: Sequence[TransitionBatch]) -> Callable[[], float]:
    """One update of a bare torch loop of the preset's update (`bare_network`, batch, double
    Q or not, clipping when it clips, `bare_optimizer`, the target network copied every
    `target_update_every` updates) on the next of `batches`, already tensors; returns the
    loss."""
    spec = env_spec(config.env)
    online, target = bare_network(config, spec), bare_network(config, spec)
    target.load_state_dict(online.state_dict())
    learner, algo = config.learner, config.algorithm
    optimizer = bare_optimizer(online.parameters(), learner)
    tensors = [
        tuple(
            torch.from_numpy(array)
            for array in (b.obs, b.actions[:, None], b.rewards, b.discounts, b.next_obs)
        )
        for b in batches
    ]
    updates = itertools.count(1)

    def update() -> float:
        count = next(updates)
        obs, taken, rewards, discounts, next_obs = tensors[count % len(tensors)]
        with torch.no_grad():
            next_q = target(next_obs)
            chooser = online(next_obs) if algo.double_q else next_q
            choice = chooser.argmax(dim=1, keepdim=True)
            targets = rewards + discounts * next_q.gather(1, choice).squeeze(1)
        q = online(obs).gather(1, taken).squeeze(1)
        loss = F.huber_loss(q, targets, delta=algo.huber_delta)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if learner.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(online.parameters(), learner.max_grad_norm)
        optimizer.step()
        if count % algo.target_update_every == 0:
            target.load_state_dict(online.state_dict())
        return loss.item()  # the metrics a learner reports cost a read each update

    return update


def rayrl_update(config: Config, batches: Sequence[TransitionBatch]) -> Callable[[], float]:
    """One update of rayrl's DQN learner on the next of `batches` (numpy, as it gets them
    from the replay; no Ray); returns the loss."""
    spec = env_spec(config.env)
    parts = ALGORITHMS[config.algorithm.name]
    learner = parts.make_learner(config.algorithm, spec, config.learner, config.run)
    cycle = itertools.cycle(batches)

    def update() -> float:
        result = learner.update(next(cycle))
        if learner.nonfinite.skipped:
            raise RuntimeError("rayrl's learner skipped a step: the timing is not an update's")
        return result.metrics["learner/loss"]

    return update


def in_process_rate(config: Config, seconds: float) -> float:
    """rayrl's learner's updates/s in this process on `played_batches` (the mean over its
    windows, comparable with a run's)."""
    update = rayrl_update(config, played_batches(config))
    return interleaved_rates({"rayrl": update}, seconds)["rayrl"].mean


@dataclass(frozen=True)
class Rate:
    """Updates/s of one contender over its interleaved windows."""

    mean: float
    """All its updates over all its windows' time: comparable with a run's rate, which is
    an average over the run too."""
    best: float
    """Its best window's: the code's cost (timeit's minimum), for comparing two contenders
    timed alike."""


def interleaved_rates(
    updates: Mapping[str, Callable[[], float]], seconds: float
) -> dict[str, Rate]:
    """Updates/s of each of `updates`, timed in turn in windows of `WINDOW_S` for `seconds`
    each in all, so that the machine's drift and its neighbours' bursts hit every contender
    alike. Each window's last loss must be finite: a diverged network times a degenerate
    update."""
    counts, times = dict.fromkeys(updates, 0), dict.fromkeys(updates, 0.0)
    best = dict.fromkeys(updates, 0.0)
    for _ in range(max(1, round(seconds / WINDOW_S))):
        for name, update in updates.items():
            count, start = 0, time.perf_counter()
            while True:  # at least one update per window
                loss = update()
                count += 1
                elapsed = time.perf_counter() - start
                if elapsed >= WINDOW_S:
                    break
            counts[name] += count
            times[name] += elapsed
            best[name] = max(best[name], count / elapsed)
            if not math.isfinite(loss):
                raise RuntimeError(f"{name}: the loss is {loss}: the timing is not an update's")
    return {name: Rate(counts[name] / times[name], best[name]) for name in updates}


def run_rate(preset: str, overrides: Sequence[str]) -> tuple[float, float]:
    """The learner's updates/s while the preset's run trains (with `overrides`), and its
    share of time busy."""
    import rayrl

    with tempfile.TemporaryDirectory() as runs:
        result = rayrl.train(
            preset, overrides=["logging.console=false", f"run.runs_dir={runs}", *overrides]
        )
        rows = [r for r in read_metrics(Path(result.run_dir)) if r.get("learner/updates")]
    if len(rows) < 2:
        raise RuntimeError("the run logged fewer than two rows with updates")
    first, last = rows[0], rows[-1]
    rate = (last["learner/updates"] - first["learner/updates"]) / (
        last["run/wall_s"] - first["run/wall_s"]
    )
    busy = statistics.median(r["learner/utilization"] for r in rows if "learner/utilization" in r)
    return rate, busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="cartpole_dqn")
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="per update measured, each round"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="an override of the preset's run (key=value), e.g. a shorter "
        "run.total_env_steps for a preset that trains for millions",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config = load_config(args.preset, args.overrides)
    algo = config.algorithm
    if algo.name != "dqn":
        parser.error("the bare loop is DQN's: use a DQN preset")
    if (
        algo.network not in ("mlp", "minatar_cnn")
        or algo.dueling
        or algo.replay.prioritized
        or algo.target_update_tau < 1.0
    ):
        parser.error(
            "the bare loop writes an MLP or the MinAtar network, a plain head, uniform replay's "
            f"loss and hard target copies; {args.preset} asks for more"
        )
    torch.set_num_threads(config.learner.num_threads)
    batches = played_batches(config)
    updates = {"bare": bare_update(config, batches), "rayrl": rayrl_update(config, batches)}
    bare, direct, run, busy = [], [], [], []
    for round_ in range(args.repeats):
        rates = interleaved_rates(updates, args.seconds)
        bare.append(rates["bare"])
        direct.append(rates["rayrl"])
        rate, utilization = run_rate(args.preset, args.overrides)
        run.append(rate)
        busy.append(utilization)
        print(
            f"round {round_ + 1}: bare {bare[-1].mean:.0f}/s (best window {bare[-1].best:.0f}), "
            f"in-process {direct[-1].mean:.0f}/s ({direct[-1].best:.0f}), "
            f"run {run[-1]:.0f}/s ({100 * utilization:.0f}% busy)",
            flush=True,
        )
    network = config.algorithm.network
    if network == "mlp":
        network = f"MLP {config.algorithm.hidden_sizes}"
    print(
        f"{args.preset}: {network}, {config.learner.optimizer}, batch "
        f"{config.learner.batch_size}, {machine()}; median (min-max) of {args.repeats}:"
    )
    for name, rates_of in (("bare torch loop   ", bare), ("rayrl, in-process ", direct)):
        print(
            f"  {name} : {median_range([r.mean for r in rates_of], '{:,.0f}')} updates/s "
            f"over its windows, best window {median_range([r.best for r in rates_of], '{:,.0f}')}"
        )
    print(f"  learner in the run : {median_range(run, '{:,.0f}')} updates/s, ", end="")
    print(f"{median_range([100 * b for b in busy], '{:.0f}')}% busy")
    ratios = [r / b.mean for r, b in zip(run, bare, strict=True)]
    best_ratios = [r / b.best for r, b in zip(run, bare, strict=True)]
    direct_ratios = [d.mean / b.mean for d, b in zip(direct, bare, strict=True)]
    print(f"  run / bare         : {median_range(ratios, '{:.2f}')}x", end="")
    print(f"; against bare's best window {median_range(best_ratios, '{:.2f}')}x")
    print(f"  in-process / bare  : {median_range(direct_ratios, '{:.2f}')}x")


if __name__ == "__main__":
    main()
