"""The learner's updates/s inside a real run, against a bare torch loop of the same network,
batch and optimizer on the same machine, side by side.

Three figures per round, interleaved (bare, in-process, run) so that the machine's drift
hits all three alike:
- **bare**: a plain single-threaded torch loop written here (the preset's MLP, its batch
  size, fused Adam, double-Q n-step targets, Huber loss, gradient clipping) on fixed random
  tensors: what the hardware allows;
- **in-process**: rayrl's own DQN learner (`update` on numpy batches, as it gets them from
  the replay) in this process, no Ray: what rayrl's update code costs over the bare loop;
- **run**: the default `rayrl.train` run (the preset as a user runs it, Ray runtime), its
  learner's rate while it trains: updates between the first and the last metrics row with
  updates, over the time between them.

    python bench/learner_rate.py --repeats 3
"""

from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import machine, median_range, read_metrics
from torch import nn
from torch.nn import functional as F

from rayrl.algorithms import ALGORITHMS
from rayrl.config import Config
from rayrl.core import TransitionBatch
from rayrl.envs import env_spec
from rayrl.presets import load_config


def bare_rate(config: Config, seconds: float) -> float:
    """Updates/s of a bare torch double-Q loop with the preset's network and batch."""
    torch.set_num_threads(config.learner.num_threads)
    spec = env_spec(config.env)
    obs_size = int(np.prod(spec.observation_space.shape))
    actions = int(spec.action_space.n)
    sizes = [obs_size, *config.algorithm.hidden_sizes]

    def mlp() -> nn.Sequential:
        layers: list[nn.Module] = []
        for inputs, outputs in itertools.pairwise(sizes):
            layers += [nn.Linear(inputs, outputs), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(sizes[-1], actions))

    online, target = mlp(), mlp()
    target.load_state_dict(online.state_dict())
    learner = config.learner
    optimizer = torch.optim.Adam(online.parameters(), lr=learner.lr, fused=True)
    batch = learner.batch_size
    obs, next_obs = torch.randn(batch, obs_size), torch.randn(batch, obs_size)
    taken = torch.randint(0, actions, (batch, 1))
    rewards, discounts = torch.randn(batch), torch.full((batch,), 0.97)
    updates, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        with torch.no_grad():
            choice = online(next_obs).argmax(dim=1, keepdim=True)
            targets = rewards + discounts * target(next_obs).gather(1, choice).squeeze(1)
        q = online(obs).gather(1, taken).squeeze(1)
        loss = F.huber_loss(q, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(online.parameters(), learner.max_grad_norm or float("inf"))
        optimizer.step()
        loss.item()  # the metrics a learner reports cost a read each update
        updates += 1
    return updates / (time.perf_counter() - start)


def in_process_rate(config: Config, seconds: float) -> float:
    """Updates/s of rayrl's DQN learner called directly on numpy batches (no Ray)."""
    torch.set_num_threads(config.learner.num_threads)
    spec = env_spec(config.env)
    parts = ALGORITHMS[config.algorithm.name]
    learner = parts.make_learner(config.algorithm, spec, config.learner, config.run)
    rng = np.random.default_rng(0)
    size = config.learner.batch_size
    shape = (size, *spec.observation_space.shape)
    dtype = spec.observation_space.dtype
    batch = TransitionBatch(
        obs=rng.standard_normal(shape).astype(dtype),
        actions=rng.integers(0, spec.action_space.n, size).astype(np.int64),
        rewards=rng.standard_normal(size).astype(np.float32),
        discounts=np.full(size, 0.97, np.float32),
        next_obs=rng.standard_normal(shape).astype(dtype),
        weights=np.ones(size, np.float32),
        indices=np.arange(size, dtype=np.int64),
    )
    updates, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        learner.update(batch)
        updates += 1
    return updates / (time.perf_counter() - start)


def run_rate(preset: str) -> tuple[float, float]:
    """The learner's updates/s while the default run trains, and its share of time busy."""
    import rayrl

    with tempfile.TemporaryDirectory() as runs:
        result = rayrl.train(preset, overrides=["logging.console=false", f"run.runs_dir={runs}"])
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
    parser.add_argument("--seconds", type=float, default=10.0, help="per bare measurement")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    config = load_config(args.preset)
    if config.algorithm.name != "dqn":
        parser.error("the bare loop is DQN's: use a DQN preset")
    bare, direct, run, busy = [], [], [], []
    for round_ in range(args.repeats):
        bare.append(bare_rate(config, args.seconds))
        direct.append(in_process_rate(config, args.seconds))
        rate, utilization = run_rate(args.preset)
        run.append(rate)
        busy.append(utilization)
        print(
            f"round {round_ + 1}: bare {bare[-1]:.0f}/s, in-process {direct[-1]:.0f}/s, "
            f"run {run[-1]:.0f}/s ({100 * utilization:.0f}% busy)",
            flush=True,
        )
    print(
        f"{args.preset}: MLP {config.algorithm.hidden_sizes}, batch {config.learner.batch_size}, "
        f"{machine()}; median (min-max) of {args.repeats}:"
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
