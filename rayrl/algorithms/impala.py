"""IMPALA: on-policy actor-critic from asynchronous actors, corrected with V-trace.

Actor-critic networks (MLP or Nature-CNN torso; a categorical head for discrete actions, a
Gaussian head with a learned state-independent log-std for Box actions), V-trace targets
(`rayrl.algorithms.vtrace`), policy-gradient, baseline and entropy losses, RMSprop or
Adam, gradient-norm clipping and a linear learning-rate decay. Truncated episodes
bootstrap from their final observation's value; terminated ones do not.

With `num_learners` > 1 each learner actor wraps its network in torch's
DistributedDataParallel: every learner takes its own batch, gradients are all-reduced
(gloo on CPU, NCCL on GPU), so parameters stay identical and the effective batch is
`num_learners * learner.batch_size` unrolls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from gymnasium import spaces
from torch import nn

from rayrl.algorithms.base import Algorithm
from rayrl.algorithms.networks import (
    NetworkKind,
    load_numpy_state_dict,
    make_torso,
    numpy_state_dict,
    resolve_device,
)
from rayrl.algorithms.vtrace import vtrace
from rayrl.config import AlgorithmConfig, Config, bounded
from rayrl.core import ModelInfo, PolicyOutput, Unrolls, UpdateResult
from rayrl.envs import EnvSpec
from rayrl.errors import ConfigError
from rayrl.processing import UnrollProcessor
from rayrl.seeding import derive_seed
from rayrl.trajectory_queue import TrajectoryQueue


@dataclass(frozen=True)
class ImpalaConfig(AlgorithmConfig):
    """IMPALA with V-trace."""

    name: str = "impala"
    network: NetworkKind = "auto"
    """Torso: "mlp", "nature_cnn", or "auto" (the CNN for image observations)."""
    hidden_sizes: tuple[int, ...] = (128, 128)
    """MLP hidden layer sizes."""
    num_steps: int = bounded(80, ge=1)
    """Unroll length: env steps per env in every unroll a worker returns."""
    gamma: float = bounded(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    rho_clip: float = bounded(1.0, gt=0.0)
    """V-trace: clipping of the importance weights in the value targets (rho bar)."""
    c_clip: float = bounded(1.0, gt=0.0)
    """V-trace: clipping of the trace coefficients (c bar)."""
    pg_rho_clip: float = bounded(1.0, gt=0.0)
    """V-trace: clipping of the importance weights in the policy gradient."""
    baseline_coef: float = bounded(0.5, ge=0.0)
    """Weight of the value (baseline) loss."""
    entropy_coef: float = bounded(0.01, ge=0.0)
    """Weight of the entropy bonus."""
    optimizer: Literal["rmsprop", "adam"] = "rmsprop"
    """Optimizer; RMSprop as in the IMPALA paper."""
    rmsprop_alpha: float = bounded(0.99, gt=0.0, lt=1.0)
    """RMSprop smoothing constant."""
    lr_decay: bool = True
    """Decay the learning rate linearly to 0 over `run.total_env_steps`."""
    num_learners: int = bounded(1, ge=1)
    """Learner actors all-reducing gradients (Ray runtime); each takes its own batch."""
    num_storages: int = bounded(64, ge=1)
    """Queue slots, one unroll each, between workers and learners; workers wait when full."""
    max_policy_lag: int = bounded(50, ge=0)
    """Unrolls acted by weights more than this many versions (updates) older than the
    learner's are dropped and counted instead of learned from."""
    compile: bool = False
    """Apply `torch.compile` to the learner's network (slower start, faster updates)."""

    def check(self, config: Config) -> None:
        learner = config.learner
        needed = self.num_learners * learner.batch_size * learner.batches_per_request
        if self.num_storages < needed:
            raise ConfigError(
                f"algorithm.num_storages={self.num_storages} cannot hold one request of every "
                f"learner: it must be at least algorithm.num_learners x learner.batch_size x "
                f"learner.batches_per_request = {needed}"
            )
        if config.run.runtime == "local" and self.num_learners > 1:
            raise ConfigError(
                f"algorithm.num_learners={self.num_learners} needs the Ray runtime "
                "(run.runtime=ray); the local runtime has one learner"
            )
        if config.replay.save_with_checkpoint:
            raise ConfigError(
                "replay.save_with_checkpoint=true has no effect with impala, which keeps no "
                "replay buffer; set it to false"
            )


def _impala_config(config: Config) -> ImpalaConfig:
    assert isinstance(config.algorithm, ImpalaConfig)
    return config.algorithm


class ActorCritic(nn.Module):
    """Policy head (logits, or a Gaussian mean with a learned log-std) and value head."""

    def __init__(self, torso: nn.Module, action_space: spaces.Space) -> None:
        super().__init__()
        self.torso = torso
        features = torso.out_features
        self.value = nn.Linear(features, 1)
        if isinstance(action_space, spaces.Discrete):
            self.continuous = False
            self.policy = nn.Linear(features, int(action_space.n))
        elif isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
            self.continuous = True
            self.policy = nn.Linear(features, action_space.shape[0])
            self.log_std = nn.Parameter(torch.zeros(action_space.shape[0]))
        else:
            raise ConfigError(
                f"algorithm.name='impala' supports Discrete and 1-D Box action spaces; this "
                f"env has {action_space}"
            )

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.torso(obs)
        return self.policy(features), self.value(features).squeeze(-1)

    def distribution(self, head: torch.Tensor) -> torch.distributions.Distribution:
        if not self.continuous:
            return torch.distributions.Categorical(logits=head)
        std = self.log_std.exp().expand_as(head)
        return torch.distributions.Independent(torch.distributions.Normal(head, std), 1)


def make_actor_critic(config: Config, spec: EnvSpec) -> ActorCritic:
    algo = _impala_config(config)
    torso = make_torso(algo.network, spec.observation_space, algo.hidden_sizes)
    return ActorCritic(torso, spec.action_space)


class ImpalaPolicy:
    """Samples from the policy (explore) or takes its mode (evaluate); reports log-probs."""

    def __init__(self, network: ActorCritic, seed: int) -> None:
        self.network = network.eval()
        self.generator = torch.Generator().manual_seed(seed)
        self.version = 0

    def act(self, obs: np.ndarray, *, explore: bool, env_steps: int = 0) -> PolicyOutput:
        with torch.inference_mode():
            head, _ = self.network(torch.from_numpy(obs))
            distribution = self.network.distribution(head)
            if not explore:
                actions = distribution.mode
            elif self.network.continuous:
                noise = torch.randn(head.shape, generator=self.generator)
                actions = head + noise * self.network.log_std.exp()
            else:
                actions = torch.multinomial(
                    distribution.probs, 1, generator=self.generator
                ).squeeze(-1)
            logp = distribution.log_prob(actions)
        return PolicyOutput(actions=actions.numpy(), extras={"logp": logp.numpy()})

    def set_weights(self, info: ModelInfo) -> None:
        load_numpy_state_dict(self.network, info.weights)
        self.version = info.version


def make_policy(config: Config, spec: EnvSpec, worker_index: int | None) -> ImpalaPolicy:
    index = -1 if worker_index is None else worker_index
    return ImpalaPolicy(
        make_actor_critic(config, spec), seed=derive_seed(config.run.seed, "policy", index + 1)
    )


class ImpalaLearner:
    """The actor-critic network, its optimizer and the V-trace update."""

    def __init__(self, config: Config, spec: EnvSpec) -> None:
        self.algo = _impala_config(config)
        self.learner_config = config.learner
        torch.manual_seed(derive_seed(config.run.seed, "learner"))
        self.device = resolve_device(config.learner.device)
        self.network = make_actor_critic(config, spec).to(self.device)
        self.distributed = dist.is_available() and dist.is_initialized()
        model: nn.Module = self.network
        if self.distributed:
            # parameters are broadcast from rank 0 here; gradients are averaged in backward
            model = nn.parallel.DistributedDataParallel(self.network)
        self.model = torch.compile(model) if self.algo.compile else model
        parameters = self.network.parameters()
        if self.algo.optimizer == "rmsprop":
            self.optimizer: torch.optim.Optimizer = torch.optim.RMSprop(
                parameters,
                lr=config.learner.lr,
                alpha=self.algo.rmsprop_alpha,
                eps=config.learner.optimizer_eps,
            )
        else:
            self.optimizer = torch.optim.Adam(
                parameters, lr=config.learner.lr, eps=config.learner.optimizer_eps
            )
        samples_per_update = (
            config.learner.batch_size * self.algo.num_steps * self.algo.num_learners
        )
        total_updates = max(1, config.run.total_env_steps // samples_per_update)
        decay = self.algo.lr_decay
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda updates: max(0.0, 1.0 - updates / total_updates) if decay else 1.0,
        )
        self.updates = 0

    def update(self, batch: Unrolls) -> UpdateResult:
        algo = self.algo
        num_unrolls, num_steps = batch.rewards.shape
        obs = self._tensor(batch.obs).flatten(0, 1)  # (B*(T+1), ...)
        final_obs = self._tensor(batch.final_obs)
        actions = self._tensor(batch.actions)
        rewards = self._tensor(batch.rewards)
        terminated = self._tensor(batch.terminated).float()
        truncated = self._tensor(batch.truncated).float()
        behaviour_logp = self._tensor(batch.behaviour_logp)

        # one forward over every observation (and the final ones of truncated steps)
        head, values = self.model(torch.cat([obs, final_obs]))
        steps_total = num_unrolls * (num_steps + 1)
        head = head[:steps_total].unflatten(0, (num_unrolls, num_steps + 1))[:, :num_steps]
        values, final_values = values[:steps_total], values[steps_total:]
        values = values.view(num_unrolls, num_steps + 1)
        distribution = self.network.distribution(head)
        target_logp = distribution.log_prob(actions)
        entropy = distribution.entropy().mean()

        # V-trace targets (time-major), bootstrapping truncated steps from their final obs
        next_values = values[:, 1:].clone()
        if len(final_obs):
            index = torch.from_numpy(batch.final_index).to(self.device)
            next_values[index[:, 0], index[:, 1]] = final_values
        targets = vtrace(
            behaviour_logp.T,
            target_logp.detach().T,
            rewards.T,
            (algo.gamma * (1.0 - terminated)).T,
            (1.0 - torch.maximum(terminated, truncated)).T,
            values[:, :num_steps].detach().T,
            next_values.detach().T,
            rho_clip=algo.rho_clip,
            c_clip=algo.c_clip,
            pg_rho_clip=algo.pg_rho_clip,
        )

        # losses
        pg_loss = -(targets.pg_advantages.T * target_logp).mean()
        baseline_loss = 0.5 * (targets.vs.T - values[:, :num_steps]).pow(2).mean()
        loss = pg_loss + algo.baseline_coef * baseline_loss - algo.entropy_coef * entropy

        # optimize
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = self.learner_config.max_grad_norm or math.inf
        grad_norm = nn.utils.clip_grad_norm_(self.network.parameters(), max_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.updates += 1

        values_out = torch.stack(
            [
                loss.detach(),
                pg_loss.detach(),
                baseline_loss.detach(),
                entropy.detach(),
                grad_norm.detach(),
            ]
        ).tolist()
        return UpdateResult(
            metrics={
                "learner/loss": values_out[0],
                "learner/pg_loss": values_out[1],
                "learner/baseline_loss": values_out[2],
                "learner/entropy": values_out[3],
                "learner/grad_norm": values_out[4],
                "learner/lr": self.scheduler.get_last_lr()[0],
            }
        )

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        # batches from Ray's object store are read-only views, which torch will not wrap
        writable = np.require(array, requirements="CW")
        return torch.from_numpy(writable).to(self.device, non_blocking=True)

    def get_weights(self) -> ModelInfo:
        return ModelInfo(self.updates, numpy_state_dict(self.network), published_at=time.time())

    def set_policy_weights(self, info: ModelInfo) -> None:
        """Start from these network weights (a warm start; the optimizer starts fresh)."""
        load_numpy_state_dict(self.network, info.weights)

    def state_dict(self) -> dict[str, Any]:
        return {
            "network": self.network.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.network.load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.updates = int(state["updates"])


def make_learner(config: Config, spec: EnvSpec) -> ImpalaLearner:
    return ImpalaLearner(config, spec)


def make_processor(config: Config, spec: EnvSpec, num_envs: int) -> UnrollProcessor:
    return UnrollProcessor(num_envs, _impala_config(config).num_steps)


def make_store(config: Config, spec: EnvSpec) -> TrajectoryQueue:
    algo = _impala_config(config)
    return TrajectoryQueue(
        algo.num_storages, algo.max_policy_lag, items_per_chunk=config.workers.envs_per_worker
    )


ALGORITHM = Algorithm(
    name="impala",
    config_class=ImpalaConfig,
    make_policy=make_policy,
    make_learner=make_learner,
    make_processor=make_processor,
    make_store=make_store,
    store_metrics="queue",
    chunk_steps=lambda config: _impala_config(config).num_steps,
)
