"""Evaluation: episodes on a separate env that sees whole games and raw scores."""

from __future__ import annotations

import numpy as np
import torch

from rayrl.algorithms import ALGORITHMS
from rayrl.config import AlgorithmConfig, EnvConfig
from rayrl.contract import Acting
from rayrl.core import EvalResult, ModelInfo
from rayrl.envs import eval_env_config, make_env, spec_of
from rayrl.envs.adapter import Episode, agent_returns
from rayrl.seeding import derive_seed
from rayrl.video import record_episode

MAX_EVAL_ENVS = 16
"""Evaluation episodes run side by side in one vector env, at most this many at a time."""


class EvaluationCancelledError(RuntimeError):
    """`Evaluator.cancel` was called while an evaluation ran."""


class Evaluator:
    """Runs evaluation episodes with given weights, on `env.eval_id` when it is set.

    Episodes are spread evenly over the envs and each env plays exactly its share, so that
    short episodes are not over-represented. Each evaluation uses fresh, reproducible seeds.
    """

    def __init__(
        self,
        env: EnvConfig,
        algorithm: AlgorithmConfig,
        episodes: int,
        run_seed: int,
        torch_threads: int | None = None,
    ) -> None:
        """`torch_threads`: set the process' torch CPU threads (one where evaluation must
        not take the cores that training uses); None leaves them as they are (the local
        runtime's process, which trains too)."""
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        self.env_config = eval_env_config(env)
        num_envs = min(episodes, MAX_EVAL_ENVS)
        self.env = make_env(self.env_config, num_envs, training=False, num_threads=num_envs)
        try:
            spec = spec_of(self.env, self.env_config)
            acting = Acting.for_evaluation(run_seed)
            self.policy = ALGORITHMS[algorithm.name].build_policy(algorithm, spec, acting)
        except BaseException:
            self.env.close()  # a process that lives on (the driver's) keeps no open env
            raise
        self.seed = derive_seed(run_seed, "eval")
        self.evaluations = 0
        self._cancelled = False

    def cancel(self) -> None:
        """Stop the evaluation under way (from another thread) at its next env step: it
        raises `EvaluationCancelledError`, and so does every later one."""
        self._cancelled = True

    def evaluate(
        self, info: ModelInfo | None, episodes: int, record_video: bool = False
    ) -> EvalResult:
        """Play `episodes` evaluation episodes; with `record_video`, one more as an MP4."""
        if info is not None:
            self.policy.set_weights(info)
        num_envs = self.env.num_copies  # with several agents, an episode is a copy's
        quota = np.full(num_envs, episodes // num_envs)
        quota[: episodes % num_envs] += 1
        done = np.zeros(num_envs, dtype=int)
        returns: list[float] = []
        lengths: list[int] = []
        finished: list[Episode] = []
        self.env.reset(seed=self.seed + 10_000 * self.evaluations)
        self.evaluations += 1
        while (done < quota).any():
            if self._cancelled:
                raise EvaluationCancelledError("the evaluation was cancelled")
            out = self.policy.act(self.env.obs, self.env.episode_starts, explore=False)
            self.env.step(out.actions)
            for episode in self.env.pop_episodes():
                if done[episode.env_index] < quota[episode.env_index]:
                    done[episode.env_index] += 1
                    returns.append(episode.episode_return)
                    lengths.append(episode.length)
                    finished.append(episode)
        video = (
            record_episode(self.env_config, self.policy, self.seed + self.evaluations)
            if record_video
            else None
        )
        per_agent = agent_returns(self.env.agent_names, finished)
        return EvalResult(
            np.array(returns),
            np.array(lengths),
            self.policy.version,
            video,
            {agent: np.array(values) for agent, values in per_agent.items()},
        )

    def close(self) -> None:
        self.env.close()
