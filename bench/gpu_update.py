"""Where a DQN update's time goes on a GPU, and what a CUDA-graphed step would save.

For a machine with a GPU. Three measurements per preset and batch size, on fixed random
batches, each after 20-30 warm-up updates:
- **variants**: rayrl's `DQNLearner.update` as it is; the part of it that moves the batch
  to the device; a bare step of the same networks and optimizer (single Q target, no
  clipping, no metrics read); `update` again with `torch.backends.cudnn.benchmark`;
- **graph prize**: one DQN step (double-Q target, weighted Huber loss, clipping, a
  capturable Adam) run eagerly, then captured once in a CUDA graph and replayed, both with
  the batch copied from pinned memory and one read of its metrics;
- **profile**: torch's profiler over 30 of rayrl's updates (pong_dqn, batch 64), by self
  CPU time and by self CUDA time: kernel launches against GPU work.

    python bench/gpu_update.py            # on the GPU machine
    python bench/gpu_update.py --device cpu --seconds 1   # the variants on its CPU
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from torch.nn import functional as F

from rayrl.algorithms import ALGORITHMS
from rayrl.algorithms.dqn import DQNLearner
from rayrl.core import TransitionBatch
from rayrl.envs import env_spec
from rayrl.presets import load_config

CASES = (("minatar_dqn", 32), ("minatar_dqn", 128), ("pong_dqn", 64), ("pong_dqn", 256))
FIELDS = ("obs", "next_obs", "actions", "rewards", "discounts", "weights")


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def ms_per_call(fn: Callable[[], object], device: str, seconds: float, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    synchronize(device)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    synchronize(device)
    return 1e3 * (time.perf_counter() - start) / calls


def make(preset: str, batch: int, device: str) -> tuple[DQNLearner, TransitionBatch]:
    """The preset's learner on `device` and a fixed random batch of `batch` transitions."""
    config = load_config(preset, [f"learner.device={device}", f"learner.batch_size={batch}"])
    spec = env_spec(config.env)
    learner = ALGORITHMS["dqn"].make_learner(config.algorithm, spec, config.learner, config.run)
    assert isinstance(learner, DQNLearner)
    rng = np.random.default_rng(0)
    shape = (batch, *spec.observation_space.shape)
    dtype = spec.observation_space.dtype

    def observations() -> np.ndarray:
        if dtype == np.uint8:
            return rng.integers(0, 255, shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)

    transitions = TransitionBatch(
        obs=observations(),
        actions=rng.integers(0, spec.action_space.n, batch).astype(np.int64),
        rewards=rng.standard_normal(batch).astype(np.float32),
        discounts=np.full(batch, 0.97, np.float32),
        next_obs=observations(),
        weights=np.ones(batch, np.float32),
        indices=np.arange(batch, dtype=np.int64),
    )
    return learner, transitions


def bare_step(learner: DQNLearner, batch: TransitionBatch) -> Callable[[], None]:
    """A step of the learner's own networks and optimizer, without clipping or reads."""
    online, target, optimizer = learner.online, learner.target, learner.optimizer
    tensors = {
        name: torch.from_numpy(np.ascontiguousarray(getattr(batch, name))).to(learner.device)
        for name in FIELDS
    }

    def step() -> None:
        with torch.no_grad():
            next_q = target(tensors["next_obs"]).max(1).values
            targets = tensors["rewards"] + tensors["discounts"] * next_q
        q = online(tensors["obs"]).gather(1, tensors["actions"][:, None]).squeeze(1)
        loss = F.huber_loss(q, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def variants(preset: str, batch: int, device: str, seconds: float) -> str:
    learner, transitions = make(preset, batch, device)
    torch.backends.cudnn.benchmark = False
    update = ms_per_call(lambda: learner.update(transitions), device, seconds)
    to_device = ms_per_call(
        lambda: [learner.tensor(getattr(transitions, name)) for name in FIELDS], device, seconds
    )
    bare = ms_per_call(bare_step(learner, transitions), device, seconds)
    torch.backends.cudnn.benchmark = True
    tuned = ms_per_call(lambda: learner.update(transitions), device, seconds)
    torch.backends.cudnn.benchmark = False
    return (
        f"{preset} batch {batch} on {device}: update {update:.2f} ms, of which batch to device "
        f"{to_device:.2f} ms; bare step without reads {bare:.2f} ms; update with "
        f"cudnn.benchmark {tuned:.2f} ms"
    )


def graph_prize(preset: str, batch: int, seconds: float) -> str:
    """One DQN step eagerly against the same step captured in a CUDA graph."""
    learner, transitions = make(preset, batch, "cuda")
    online, target = learner.online, learner.target
    pinned = {
        name: torch.from_numpy(np.ascontiguousarray(getattr(transitions, name))).pin_memory()
        for name in FIELDS
    }
    static = {name: tensor.to("cuda") for name, tensor in pinned.items()}
    optimizer = torch.optim.Adam(online.parameters(), lr=1e-4, capturable=True)

    def step() -> torch.Tensor:
        with torch.no_grad():
            next_q = target(static["next_obs"])
            chosen = online(static["next_obs"]).argmax(1, keepdim=True)
            targets = static["rewards"] + static["discounts"] * next_q.gather(1, chosen).squeeze(1)
        q = online(static["obs"]).gather(1, static["actions"][:, None]).squeeze(1)
        loss = (static["weights"] * F.huber_loss(q, targets, reduction="none")).mean()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(online.parameters(), 40.0)
        optimizer.step()
        return torch.stack([loss.detach(), q.detach().mean(), norm])

    def copy_batch() -> None:
        for name, tensor in static.items():
            tensor.copy_(pinned[name], non_blocking=True)

    def eager() -> None:
        copy_batch()
        optimizer.zero_grad(set_to_none=True)
        step().tolist()

    eager_ms = ms_per_call(eager, "cuda", seconds, warmup=30)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            optimizer.zero_grad(set_to_none=True)
            step()
    torch.cuda.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        metrics = step()

    def graphed() -> None:
        copy_batch()
        graph.replay()
        metrics.tolist()

    graph_ms = ms_per_call(graphed, "cuda", seconds, warmup=30)
    return (
        f"{preset} batch {batch}: eager step {eager_ms:.2f} ms, CUDA-graphed step "
        f"{graph_ms:.2f} ms ({eager_ms / graph_ms:.1f}x), both with pinned copies and one "
        "metrics read"
    )


def profile(device: str) -> None:
    learner, transitions = make("pong_dqn", 64, device)
    for _ in range(20):
        learner.update(transitions)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        for _ in range(30):
            learner.update(transitions)
        synchronize(device)
    table = profiler.key_averages().table
    print(table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=40))
    if device.startswith("cuda"):
        print(table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=40))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    args = parser.parse_args()
    on_gpu = args.device.startswith("cuda")
    if on_gpu and not torch.cuda.is_available():
        parser.error("torch sees no CUDA device: use --device cpu")
    for preset, batch in CASES:
        print(variants(preset, batch, args.device, args.seconds), flush=True)
    profile(args.device)
    if on_gpu:
        for preset, batch in (("minatar_dqn", 32), ("pong_dqn", 64), ("pong_dqn", 256)):
            print(graph_prize(preset, batch, args.seconds), flush=True)


if __name__ == "__main__":
    main()
