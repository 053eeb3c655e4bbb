"""The process shell around the learner, for the Ray runtime.

The learners do not know about processes; this shell gives one what a long-lived actor
needs (Sample Factory's learner vs learner_worker split): it pulls batches from the
experience actor (`rayrl.ray.experience_service`) itself, keeping `prefetch_requests`
requests in flight so that it does not wait on it (or one, for the freshest unrolls), sends
priorities back without waiting, and joins its peers' process group when there are several
learners. It also answers its supervisor's probe
(`pulse`, from a concurrency group of its own, beside a `train` call in progress) with what
its training thread is doing: waiting for the experience actor, or working, and for how
long without progress, so that a learner waiting on a busy store is told from a hung one
(`rayrl.ray.learners`).

`rayrl.ray.factory` turns it into a Ray actor.
"""

from __future__ import annotations

import hashlib
import socket
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import ray
import torch
import torch.distributed as dist

from rayrl.algorithms import ALGORITHMS
from rayrl.checkpoint import to_numpy_tree
from rayrl.config import AlgorithmConfig, LearnerConfig, RunConfig
from rayrl.contract import Learner
from rayrl.core import ModelInfo, NonFiniteSteps
from rayrl.envs.spec import EnvSpec
from rayrl.ray.identity import Identified


@dataclass
class LearnerReport:
    """What one `LearnerService.train` call did."""

    updates: int
    """Updates done in this call."""
    total_updates: int
    """The learner's update count after this call (the version of the returned weights)."""
    update_s: float
    wall_s: float
    sampled: int
    metrics: dict[str, list[float]] = field(default_factory=dict)
    nonfinite: NonFiniteSteps = field(default_factory=NonFiniteSteps)


IDLE, WAITING, WORKING = "idle", "waiting", "working"
"""What a learner's training thread does: nothing (between calls), wait for a batch from
the experience actor, or work on its own (updates, the all-reduce with its peers, its
state)."""


@dataclass(frozen=True)
class LearnerPulse:
    """A learner's answer to its probe."""

    waiting_for_store: bool
    """It waits for a batch from the experience actor (which may be saving, or hung: the
    store's supervisor deals with that)."""
    stalled_s: float
    """How long it has been working without progress (no update finished, no batch or call
    began): a CUDA kernel or an all-reduce that never returns. 0 when idle or waiting."""


@dataclass(frozen=True)
class LearnerStart:
    """Where a learner starts from: a checkpoint's state (a resume or a restore), or acting
    weights to warm-start from, or (both None) fresh."""

    state: dict[str, Any] | None = None
    warm_start: ModelInfo | None = None


class LearnerService(Identified):
    """The learner, pulling its own batches from the experience actor.

    With several learners (`learner.num_learners`), rank 0 offers an address
    (`group_address`), every learner calls `join_group` with it at once, and only then
    builds its learner, whose network torch's DistributedDataParallel wraps.
    """

    def __init__(
        self,
        algorithm: AlgorithmConfig,
        spec: EnvSpec,
        settings: LearnerConfig,
        run: RunConfig,
        store: Any,
        start: LearnerStart,
    ) -> None:
        torch.set_num_threads(settings.num_threads)
        self.algorithm = algorithm
        self.spec = spec
        self.settings = settings
        self.run = run
        self.store = store
        self.start = start
        self.learner: Learner | None = None
        self._requests: deque = deque()
        self._batches: deque = deque()
        self._activity = (IDLE, time.monotonic())
        """What the training thread does, and since when (read by `pulse`'s thread)."""
        if settings.num_learners == 1:
            self._build()

    def group_address(self) -> tuple[str, int]:
        """This node's address and a free port for the learners' process group (rank 0)."""
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def join_group(self, address: tuple[str, int], rank: int, world_size: int) -> None:
        """Join the learners' process group (blocks until all have joined), then build."""
        host, port = address
        on_gpu = torch.cuda.is_available() and self.settings.device != "cpu"
        # NCCL reduces GPU tensors only; the group's small CPU reductions (whether every
        # learner got a batch) go through gloo
        backend = "cpu:gloo,cuda:nccl" if on_gpu else "gloo"
        dist.init_process_group(
            backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world_size
        )
        self._build()

    @property
    def distributed(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    @staticmethod
    def _all_have(batch: Any) -> bool:
        flag = torch.tensor([0 if batch is None else 1])
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def _build(self) -> None:
        make_learner = ALGORITHMS[self.algorithm.name].build_learner
        self.learner = make_learner(self.algorithm, self.spec, self.settings, self.run)
        if self.start.state is not None:
            self.learner.load_state_dict(self.start.state)
        elif self.start.warm_start is not None:
            self.learner.set_policy_weights(self.start.warm_start)
        self.start = LearnerStart()

    @property
    def _learner(self) -> Learner:
        assert self.learner is not None, "the learner is built once its group has formed"
        return self.learner

    def _now(self, activity: str) -> None:
        """The training thread does `activity` from now on (each call marks progress)."""
        self._activity = (activity, time.monotonic())

    @contextmanager
    def _working(self) -> Iterator[None]:
        self._now(WORKING)
        try:
            yield
        finally:
            self._now(IDLE)

    def pulse(self) -> LearnerPulse:
        """The probe's answer (its own concurrency group: it runs beside a `train` call; a
        stopped or frozen process does not answer it)."""
        activity, since = self._activity
        stalled = time.monotonic() - since if activity == WORKING else 0.0
        return LearnerPulse(waiting_for_store=activity == WAITING, stalled_s=stalled)

    def set_store(self, store: Any) -> None:
        """Use a new experience actor (after the old one died)."""
        self.store = store
        self._requests.clear()
        self._batches.clear()

    def _next_batch(self) -> Any:
        while not self._batches:
            while len(self._requests) < self.settings.prefetch_requests:
                self._requests.append(
                    self.store.sample.remote(
                        self.settings.batch_size,
                        self.settings.batches_per_request,
                        self._learner.updates,
                    )
                )
            self._now(WAITING)
            batches = ray.get(self._requests.popleft())
            self._now(WORKING)
            if not batches:  # the experience service was stopped
                return None
            self._batches.extend(batches)
        return self._batches.popleft()

    def placement(self) -> dict[str, str]:
        """Where this learner runs: Ray node id and torch device."""
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "device": str(self._learner.device),
        }

    def train(self, num_updates: int) -> tuple[LearnerReport, ModelInfo]:
        """Run up to `num_updates` updates; returns a report and the new weights."""
        with self._working():
            return self._train(num_updates)

    def _train(self, num_updates: int) -> tuple[LearnerReport, ModelInfo]:
        start = time.perf_counter()
        update_s = update_cpu_s = 0.0
        metrics: dict[str, list[float]] = defaultdict(list)
        indices, priorities = [], []
        done = 0
        while done < num_updates:
            batch = self._next_batch()
            if self.distributed and not self._all_have(batch):
                batch = None  # a peer's store was stopped: all stop, none waits in all-reduce
            if batch is None:  # the store was stopped: the run is ending
                break
            t0, cpu0 = time.perf_counter(), time.thread_time()
            result = self._learner.update(batch)
            self._now(WORKING)  # progress
            update_s += time.perf_counter() - t0
            update_cpu_s += time.thread_time() - cpu0
            done += 1
            for key, value in result.metrics.items():
                metrics[key].append(value)
            if result.priorities is not None:
                indices.append(batch.indices)
                priorities.append(result.priorities)
        if indices:  # one message per call, not per update; nobody waits for it
            self.store.update_priorities.remote(np.concatenate(indices), np.concatenate(priorities))
        if done:
            # an update's wall time, and the CPU time of the thread that ran it: for a CPU
            # learner on one torch thread, wall above CPU is time the thread waited for a
            # core (other processes, or its interpreter lock held by the actor's other
            # threads), not slower code; torch's other threads and a GPU's time are not in it
            metrics["learner/update_ms"] = [1000 * update_s / done]
            metrics["learner/update_cpu_ms"] = [1000 * update_cpu_s / done]
        report = LearnerReport(
            updates=done,
            total_updates=self._learner.updates,
            update_s=update_s,
            wall_s=time.perf_counter() - start,
            sampled=done * self.settings.batch_size,
            metrics=dict(metrics),
            nonfinite=replace(self._learner.nonfinite),
        )
        return report, self._learner.get_weights()

    def weights(self) -> ModelInfo:
        with self._working():
            return self._learner.get_weights()

    def state(self) -> dict[str, Any]:
        """The full learner state as numpy (faster through the object store than tensors)."""
        with self._working():
            return to_numpy_tree(self._learner.state_dict())

    def parameters_digest(self) -> str:
        """A hash of the network parameters (learners in one group must agree)."""
        digest = hashlib.sha256()
        with self._working():
            for value in self._learner.get_weights().weights.values():
                digest.update(np.ascontiguousarray(value).tobytes())
        return digest.hexdigest()
