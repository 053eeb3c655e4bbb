"""The rollout worker: a vector env, a CPU copy of the policy and a step processor.

A plain class; the Ray runtime (`rayrl.ray`) makes it an actor, the local runtime calls it
directly. In the Ray runtime `set_weights` runs in its own thread, beside a sample call in
progress: while a chunk is being sampled it only drops the new weights into an inbox, and
the sampling loop applies the newest ones before its next step; between chunks (a worker
held back by the replay ratio waits there) it applies them at once. Sampling never waits
for the learner, and a new version is in use from the env step after it arrives, not a
whole chunk later (the Acme VariableClient idea, push-based). The weight-sync latency a
worker reports is from the learner's publication to that moment.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import torch

from rayrl.algorithms import ALGORITHMS
from rayrl.config import AlgorithmConfig, EnvConfig, WorkersConfig
from rayrl.contract import Acting, Chunk
from rayrl.core import ChunkStats, ModelInfo
from rayrl.envs import make_env, spec_of
from rayrl.seeding import derive_seed


class RolloutWorker:
    def __init__(
        self,
        env: EnvConfig,
        workers: WorkersConfig,
        algorithm: AlgorithmConfig,
        run_seed: int,
        worker_index: int,
        incarnation: int = 0,
    ) -> None:
        """Worker `worker_index` of the fleet; `incarnation` counts its replacements, so that
        a replaced worker explores fresh episodes instead of replaying its predecessor's."""
        # one thread per worker process: workers scale by process, and torch's default
        # (all cores) would oversubscribe the machine once there are several
        torch.set_num_threads(1)
        parts = ALGORITHMS[algorithm.name]
        self.worker_index = worker_index
        self.steps_per_chunk = parts.family.chunk_steps(algorithm)
        threads = workers.env_threads or max(1, round(workers.cpus_per_worker))
        self.env = make_env(env, workers.envs_per_worker, training=True, num_threads=threads)
        self.spec = spec_of(self.env, env)
        acting = Acting(run_seed, worker_index, workers.envs_per_worker, workers.num_workers)
        self.policy = parts.build_policy(algorithm, self.spec, acting)
        self.processor = parts.family.make_processor(algorithm, self.spec, workers.envs_per_worker)
        self.env.reset(seed=derive_seed(run_seed, "env", worker_index, incarnation))
        self._inbox: deque[ModelInfo] = deque(maxlen=1)  # thread-safe; the newest wins
        self._sampling = False
        self._lock = threading.Lock()
        """Guards `_sampling`: weights are applied by the sampling thread while it samples,
        by the caller of `set_weights` otherwise."""
        self._syncs_between_chunks: list[float] = []
        """Latencies of weights applied between chunks, reported with the next chunk."""

    def set_weights(self, info: ModelInfo) -> None:
        """Act with these weights from the next env step on."""
        with self._lock:
            if self._sampling:
                self._inbox.append(info)
            else:
                self._apply(info, self._syncs_between_chunks)

    def _apply(self, info: ModelInfo, sync_latencies: list[float]) -> None:
        self.policy.set_weights(info)
        if info.published_at:
            sync_latencies.append(time.time() - info.published_at)

    def _apply_new_weights(self, sync_latencies: list[float]) -> None:
        try:
            info = self._inbox.popleft()
        except IndexError:
            return
        self._apply(info, sync_latencies)

    def sample(self, run_env_steps: int = 0) -> tuple[Chunk, ChunkStats]:
        """Step every env `steps_per_chunk` times; returns the processor's chunk and stats.

        `run_env_steps` is the run's env-step count when the chunk was requested; it drives
        exploration schedules.
        """
        with self._lock:
            self._sampling = True
            sync_latencies, self._syncs_between_chunks = self._syncs_between_chunks, []
        act_s = step_s = process_s = 0.0
        num_envs = self.env.num_envs
        try:
            for t in range(self.steps_per_chunk):
                self._apply_new_weights(sync_latencies)
                t0 = time.perf_counter()
                out = self.policy.act(
                    self.env.obs,
                    self.env.episode_starts,
                    explore=True,
                    env_steps=run_env_steps + t * num_envs,
                )
                t1 = time.perf_counter()
                step = self.env.step(out.actions, out.extras, out.state)
                t2 = time.perf_counter()
                self.processor.process(step, self.policy.version)
                t3 = time.perf_counter()
                act_s, step_s = act_s + t1 - t0, step_s + t2 - t1
                process_s += t3 - t2
        finally:
            with self._lock:
                self._sampling = False
                self._apply_new_weights(self._syncs_between_chunks)  # came after the last step
        t0 = time.perf_counter()
        chunk = self.processor.flush()
        process_s += time.perf_counter() - t0
        episodes = self.env.pop_episodes()
        stats = ChunkStats(
            worker_index=self.worker_index,
            env_steps=self.steps_per_chunk * num_envs,
            episode_returns=[e.episode_return for e in episodes],
            episode_lengths=[e.length for e in episodes],
            policy_version=chunk.policy_version,
            act_s=act_s,
            step_s=step_s,
            process_s=process_s,
            sync_latencies_s=sync_latencies,
        )
        return chunk, stats

    def close(self) -> None:
        self.env.close()
