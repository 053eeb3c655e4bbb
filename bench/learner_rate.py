"""The learner's updates/s inside a real run, against a bare torch loop of the same network,
batch and optimizer on the same machine, side by side.

Three figures per round, so that the machine's drift hits all three alike (bare and
in-process timed in turn in half-second windows, the best window of each counting: the code's
cost, as timeit's minimum, on a machine whose speed drifts):
- **bare**: a plain single-threaded torch loop written here on fixed random tensors, what
  the hardware allows: the preset's network (its MLP, or for `network: minatar_cnn` the
  plain loop's MinAtar network, `bench/plain_dqn.py`), batch size and targets (double Q or
  not), Huber loss, gradient clipping when the preset clips, and its optimizer as a user
  writes it (fused Adam; RMSprop with torch's defaults, its per-tensor loop on a CPU);
- **in-process**: rayrl's own DQN learner (`update` on numpy batches, as it gets them from
  the replay) in this process, no Ray: what rayrl's update code costs over the bare loop;
- **run**: the preset's `rayrl.train` run (as a user runs it, Ray runtime; `--set` shortens
  a long one), its learner's rate while it trains: updates between the first and the last
  metrics row with updates, over the time between them.

    python bench/learner_rate.py --repeats 3
    python bench/learner_rate.py --preset minatar_dqn --set run.total_env_steps=15000
"""

from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from rayrl.envs import env_spec
from rayrl.envs.spec import EnvSpec
from rayrl.presets import load_config

WINDOW_S = 0.5
"""How long each timing window of `best_rates` lasts."""


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


def bare_update(config: Config) -> Callable[[], object]:
    """One update of a bare torch loop of the preset's update (`bare_network`, batch, double
    Q or not, clipping when it clips, `bare_optimizer`) on fixed tensors."""
    spec = env_spec(config.env)
    online, target = bare_network(config, spec), bare_network(config, spec)
    target.load_state_dict(online.state_dict())
    learner, algo = config.learner, config.algorithm
    optimizer = bare_optimizer(online.parameters(), learner)
    obs, next_obs = (random_obs(spec, learner.batch_size, seed) for seed in (0, 1))
    taken = torch.randint(0, int(spec.action_space.n), (learner.batch_size, 1))
    rewards, discounts = torch.randn(learner.batch_size), torch.full((learner.batch_size,), 0.97)

    def update() -> float:
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
        return loss.item()  # the metrics a learner reports cost a read each update

    return update


def random_obs(spec: EnvSpec, size: int, seed: int) -> torch.Tensor:
    """A batch of observations of the env's shape and dtype (MinAtar's 0/1 grids: mostly 0)."""
    rng = np.random.default_rng(seed)
    shape = (size, *spec.observation_space.shape)
    dtype = spec.observation_space.dtype
    if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
        return torch.from_numpy((rng.random(shape) < 0.1).astype(dtype))
    return torch.from_numpy(rng.standard_normal(shape).astype(dtype))


def rayrl_update(config: Config) -> Callable[[], object]:
    """One update of rayrl's DQN learner on a fixed numpy batch, as it gets them from the
    replay (no Ray)."""
    spec = env_spec(config.env)
    parts = ALGORITHMS[config.algorithm.name]
    learner = parts.make_learner(config.algorithm, spec, config.learner, config.run)
    rng = np.random.default_rng(0)
    size = config.learner.batch_size
    batch = TransitionBatch(
        obs=random_obs(spec, size, 0).numpy(),
        actions=rng.integers(0, spec.action_space.n, size).astype(np.int64),
        rewards=rng.standard_normal(size).astype(np.float32),
        discounts=np.full(size, 0.97, np.float32),
        next_obs=random_obs(spec, size, 1).numpy(),
        weights=np.ones(size, np.float32),
        indices=np.arange(size, dtype=np.int64),
    )
    return lambda: learner.update(batch)


def best_rates(updates: Mapping[str, Callable[[], object]], seconds: float) -> dict[str, float]:
    """Updates/s of each of `updates`, timed in turn in windows of `WINDOW_S` for `seconds`
    each in all: the best window's rate, so that the machine's drift and its neighbours'
    bursts hit every contender alike and the figure is the code's cost (timeit's minimum)."""
    best = dict.fromkeys(updates, 0.0)
    for _ in range(max(1, round(seconds / WINDOW_S))):
        for name, update in updates.items():
            count, start = 0, time.perf_counter()
            while time.perf_counter() - start < WINDOW_S:
                update()
                count += 1
            best[name] = max(best[name], count / (time.perf_counter() - start))
    return best


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
    if config.algorithm.name != "dqn":
        parser.error("the bare loop is DQN's: use a DQN preset")
    torch.set_num_threads(config.learner.num_threads)
    updates = {"bare": bare_update(config), "rayrl": rayrl_update(config)}
    bare, direct, run, busy = [], [], [], []
    for round_ in range(args.repeats):
        rates = best_rates(updates, args.seconds)
        bare.append(rates["bare"])
        direct.append(rates["rayrl"])
        rate, utilization = run_rate(args.preset, args.overrides)
        run.append(rate)
        busy.append(utilization)
        print(
            f"round {round_ + 1}: bare {bare[-1]:.0f}/s, in-process {direct[-1]:.0f}/s, "
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
    print(f"  bare torch loop    : {median_range(bare, '{:,.0f}')} updates/s")
    print(f"  rayrl learner      : {median_range(direct, '{:,.0f}')} updates/s, in-process")
    print(f"  learner in the run : {median_range(run, '{:,.0f}')} updates/s, ", end="")
    print(f"{median_range([100 * b for b in busy], '{:.0f}')}% busy")
    ratios = [r / b for r, b in zip(run, bare, strict=True)]
    direct_ratios = [d / b for d, b in zip(direct, bare, strict=True)]
    print(f"  run / bare         : {median_range(ratios, '{:.2f}')}x (target >= 0.6x)")
    print(f"  in-process / bare  : {median_range(direct_ratios, '{:.2f}')}x")


if __name__ == "__main__":
    main()
