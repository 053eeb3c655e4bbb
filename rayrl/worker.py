"""The rollout worker: a vector env, a CPU copy of the policy and a step processor.

A plain class, with no threads or locks: the local runtime calls it directly, and the Ray
runtime wraps it in its actor shell (`rayrl.ray.worker_service`), which takes weights that
arrive during a sample call and hands them over before the next env step (`sample`'s
`before_each_step`). The weight-sync latency a worker reports with a chunk is from the
learner's publication to the moment the weights were in use, for every set of weights
applied since the last chunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from rayrl.algorithms import ALGORITHMS
from rayrl.config import AlgorithmConfig, EnvConfig, WorkersConfig
from rayrl.contract import Acting, Chunk
from rayrl.core import ChunkStats, ModelInfo
from rayrl.envs import make_env, spec_of
from rayrl.envs.adapter import agent_returns
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
        self.processor = parts.family.make_processor(algorithm, self.spec, self.env.num_envs)
        self.env.reset(seed=derive_seed(run_seed, "env", worker_index, incarnation))
        self._sync_latencies: list[float] = []
        """Latencies of the weights applied since the last chunk, reported with the next."""

    def set_weights(self, info: ModelInfo) -> None:
        """Act with these weights from the next env step on."""
        self.policy.set_weights(info)
        if info.published_at:
            self._sync_latencies.append(time.time() - info.published_at)

    def sample(
        self, run_env_steps: int = 0, before_each_step: Callable[[], None] = lambda: None
    ) -> tuple[Chunk, ChunkStats]:
        """Step every env `steps_per_chunk` times; returns the processor's chunk and stats.

        `run_env_steps` is the run's env-step count when the chunk was requested; it drives
        exploration schedules. `before_each_step()` runs before every env step (the Ray
        shell applies weights that arrived meanwhile there).
        """
        act_s = step_s = process_s = 0.0
        copies = self.env.num_copies  # env steps: with several agents, each copy's steps
        for t in range(self.steps_per_chunk):
            before_each_step()
            t0 = time.perf_counter()
            out = self.policy.act(
                self.env.obs,
                self.env.episode_starts,
                explore=True,
                env_steps=run_env_steps + t * copies,
            )
            t1 = time.perf_counter()
            step = self.env.step(out.actions, out.extras, out.state)
            t2 = time.perf_counter()
            self.processor.process(step, self.policy.version)
            t3 = time.perf_counter()
            act_s, step_s = act_s + t1 - t0, step_s + t2 - t1
            process_s += t3 - t2
        t0 = time.perf_counter()
        chunk = self.processor.flush()
        process_s += time.perf_counter() - t0
        episodes = self.env.pop_episodes()
        stats = ChunkStats(
            worker_index=self.worker_index,
            env_steps=self.steps_per_chunk * copies,
            episode_returns=[e.episode_return for e in episodes],
            episode_lengths=[e.length for e in episodes],
            policy_version=chunk.policy_version,
            agent_returns=agent_returns(self.env.agent_names, episodes),
            act_s=act_s,
            step_s=step_s,
            process_s=process_s,
            sync_latencies_s=self._sync_latencies,
        )
        self._sync_latencies = []
        return chunk, stats

    def close(self) -> None:
        self.env.close()
