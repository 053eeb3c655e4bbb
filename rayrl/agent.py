"""`DistributedAgent`: IMPALA on Ray behind the API of rllte's `DistributedAgent`.

For users coming from rllte. The constructor takes the same arguments; `train` and `eval`
behave as rllte's are documented to, with the parts that do not work there working here:
`eval_interval` and `save_interval` really evaluate and save, `init_model_path` warm-starts
the network, and `th_compile` compiles the learner's network with `torch.compile`.
Everything else (workers, queue, learners, fault tolerance, checkpoints, W&B) is rayrl's Ray
runtime, configured from the `cartpole_impala` or `pong_impala` preset.

    agent = rayrl.DistributedAgent("CartPole-v1", num_actors=2, num_learners=1, batch_size=8)
    agent.train(num_train_steps=200_000, eval_interval=10_000)
    print(agent.eval(num_eval_episodes=10)["episode_rewards"])
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rayrl.config import Config, EnvConfig
from rayrl.envs.atari import ATARI
from rayrl.errors import UserError, did_you_mean
from rayrl.presets import load_config, with_overrides
from rayrl.run_lifecycle import TrainResult

KEYWORDS = {
    "batch_size": "learner.batch_size",
    "lr": "learner.lr",
    "eps": "learner.optimizer_eps",
    "max_grad_norm": "learner.max_grad_norm",
    "hidden_dim": "algorithm.hidden_sizes",
    "gamma": "algorithm.gamma",
    "ent_coef": "algorithm.entropy_coef",
    "vf_coef": "algorithm.baseline_coef",
    "max_policy_lag": "algorithm.max_policy_lag",
    "num_envs": "workers.envs_per_worker",
    "runtime": "run.runtime",
}
"""rllte's keyword arguments and the config fields they set. Any config field can also be
given by its dotted name, e.g. `**{"learner.lr": 1e-4}`."""


def _override(key: str, value: Any) -> str:
    return f"{key}={json.dumps(value)}"  # JSON is YAML, which overrides are parsed as


class DistributedAgent:
    """IMPALA with V-trace on Ray: `num_actors` rollout workers, `num_learners` learners
    all-reducing gradients, `num_storages` queue slots of one unroll each.

    Args:
        env: a gymnasium env id, an `EnvConfig`, or a whole `Config`.
        eval_env: an env id to evaluate on instead (same spaces); None evaluates on `env`.
        tag: experiment tag: names the run directory and tags the W&B run.
        seed: the run's seed.
        device: the learners' torch device ("cpu", "cuda", "auto").
        num_steps: unroll length (`algorithm.steps_per_chunk`; the keyword is rllte's).
        num_actors: rollout workers (Ray actors); rllte's default of 45 is for a big box.
        num_learners: learner actors; the effective batch is num_learners x batch_size.
        num_storages: unrolls the queue between workers and learners holds
            (`algorithm.queue_capacity`; the keyword is rllte's).
        **kwargs: `batch_size`, `lr`, `hidden_dim`, ... (see `KEYWORDS`) or dotted config keys.
    """

    def __init__(
        self,
        env: str | EnvConfig | Config,
        eval_env: str | None = None,
        tag: str = "default",
        seed: int = 1,
        device: str = "cpu",
        num_steps: int = 80,
        num_actors: int = 2,
        num_learners: int = 1,
        num_storages: int = 64,
        **kwargs: Any,
    ) -> None:
        if isinstance(env, Config):
            base = env
        else:
            env_id = env.id if isinstance(env, EnvConfig) else env
            base = load_config("pong_impala" if ATARI.owns(env_id) else "cartpole_impala")
            if isinstance(env, EnvConfig):
                base = replace(base, env=env)
            else:
                base = with_overrides(base, [_override("env.id", env_id)])
        overrides = [
            _override("algorithm.name", "impala"),
            _override("run.seed", seed),
            _override("learner.device", device),
            _override("algorithm.steps_per_chunk", num_steps),
            _override("workers.num_workers", num_actors),
            _override("learner.num_learners", num_learners),
            _override("algorithm.queue_capacity", num_storages),
            _override("logging.wandb.tags", [tag]),
        ]
        if eval_env is not None:
            overrides.append(_override("env.eval_id", eval_env))
        for key, value in kwargs.items():
            if key == "hidden_dim":
                value = [value, value]
            if key in KEYWORDS:
                overrides.append(_override(KEYWORDS[key], value))
            elif "." in key:
                overrides.append(_override(key, value))
            else:
                raise UserError(
                    f"DistributedAgent: unknown keyword argument {key!r}"
                    f"{did_you_mean(key, KEYWORDS)}; known: {', '.join(KEYWORDS)}, or a "
                    "dotted config key such as 'learner.lr'"
                )
        self.tag = tag
        self.config = with_overrides(base, overrides)
        self.result: TrainResult | None = None

    def train(
        self,
        num_train_steps: int,
        init_model_path: str | None = None,
        log_interval: int = 1,
        eval_interval: int = 5000,
        save_interval: int = 5000,
        num_eval_episodes: int = 10,
        th_compile: bool = False,
    ) -> TrainResult:
        """Train for `num_train_steps` env steps (or until `run.target_return`).

        Args:
            num_train_steps: env steps, summed over all actors' envs.
            init_model_path: a rayrl checkpoint (or run directory) to start the network from.
            log_interval: seconds between metric records (JSONL, console, W&B).
            eval_interval: env steps between evaluations (greedy, on `eval_env`).
            save_interval: env steps between checkpoints.
            num_eval_episodes: episodes per evaluation.
            th_compile: compile the learner's network with `torch.compile`.
        """
        from rayrl.api import checkpoint_path, train

        overrides = [
            _override("run.total_env_steps", num_train_steps),
            _override("logging.log_interval_s", log_interval),
            _override("run.eval_interval_env_steps", eval_interval),
            _override("run.checkpoint_interval_env_steps", save_interval),
            _override("run.eval_episodes", num_eval_episodes),
            _override("algorithm.compile", th_compile),
            _override("run.name", f"{self.tag}-{time.strftime('%Y%m%d-%H%M%S')}"),
        ]
        if init_model_path is not None:
            path = checkpoint_path(Path(init_model_path), "best")
            overrides.append(_override("run.init_checkpoint", str(path)))
        self.result = train(self.config, overrides=overrides)
        return self.result

    def eval(self, num_eval_episodes: int) -> dict[str, list[float]]:
        """Evaluate the trained policy (the latest checkpoint) greedily.

        Returns:
            {"episode_rewards": [...], "episode_lengths": [...]}, one entry per episode.
        """
        from rayrl.api import evaluate

        if self.result is None:
            raise UserError("DistributedAgent.eval: nothing trained yet; call train() first")
        # its own run: the env id is the one this agent was built with
        result = evaluate(
            self.result.run_dir, episodes=num_eval_episodes, which="latest", trust_env=True
        )
        return {
            "episode_rewards": [float(r) for r in result.returns],
            "episode_lengths": [int(n) for n in result.lengths],
        }
