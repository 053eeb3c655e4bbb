"""IMPALA: on-policy actor-critic from asynchronous actors, corrected with V-trace.

The shared actor-critic (`rayrl.algorithms.actor_critic`), V-trace targets
(`rayrl.algorithms.vtrace`), policy-gradient, baseline and entropy losses, RMSprop or
Adam, gradient-norm clipping and a linear learning-rate decay. Truncated episodes
bootstrap from their final observation's value; terminated ones do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from rayrl.algorithms.actor_critic import (
    episode_flags,
    forward_unrolls,
    make_actor_critic,
    make_actor_critic_policy,
)
from rayrl.algorithms.torch_learner import TorchLearner, linear_decay
from rayrl.algorithms.vtrace import vtrace
from rayrl.config import LearnerConfig, RunConfig
from rayrl.contract import Algorithm
from rayrl.core import Unrolls, UpdateResult
from rayrl.envs.spec import EnvSpec
from rayrl.families.on_policy import ON_POLICY, OnPolicyConfig, planned_updates
from rayrl.seeding import derive_seed
from rayrl.strict import bounded


@dataclass(frozen=True)
class ImpalaConfig(OnPolicyConfig):
    """IMPALA with V-trace."""

    name: str = "impala"
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
    compile: bool = False
    """Apply `torch.compile` to the learner's network (slower start, faster updates)."""


class ImpalaLearner(TorchLearner):
    """The actor-critic network, its optimizer and the V-trace update."""

    def __init__(
        self, algo: ImpalaConfig, spec: EnvSpec, settings: LearnerConfig, run: RunConfig
    ) -> None:
        super().__init__(settings, derive_seed(run.seed, "learner"))
        self.algo = algo
        self.network = self.acting_network = make_actor_critic(algo, spec).to(self.device)
        model = self.all_reduced(self.network)
        self.model = torch.compile(model) if algo.compile else model
        if algo.optimizer == "rmsprop":
            self.optimizer = torch.optim.RMSprop(
                self.network.parameters(),
                lr=settings.lr,
                alpha=algo.rmsprop_alpha,
                eps=settings.optimizer_eps,
            )
        else:
            self.optimizer = torch.optim.Adam(
                self.network.parameters(), lr=settings.lr, eps=settings.optimizer_eps
            )
        self.scheduler = linear_decay(
            self.optimizer, planned_updates(algo, settings, run), algo.lr_decay
        )

    def components(self) -> dict[str, Any]:
        return {"network": self.network, "optimizer": self.optimizer, "scheduler": self.scheduler}

    def update(self, batch: Unrolls) -> UpdateResult:
        algo = self.algo
        out = forward_unrolls(self.model, batch, self.tensor)
        distribution = self.network.distribution(out.head)
        target_logp = distribution.log_prob(self.tensor(batch.actions))
        entropy = distribution.entropy().mean()
        terminated, ended = episode_flags(batch, self.tensor)

        # V-trace targets (time-major), bootstrapping truncated steps from their final obs
        targets = vtrace(
            self.tensor(batch.behaviour_logp).T,
            target_logp.detach().T,
            self.tensor(batch.rewards).T,
            (algo.gamma * (1.0 - terminated)).T,
            (1.0 - ended).T,
            out.values.detach().T,
            out.next_values.detach().T,
            rho_clip=algo.rho_clip,
            c_clip=algo.c_clip,
            pg_rho_clip=algo.pg_rho_clip,
        )

        # losses
        pg_loss = -(targets.pg_advantages.T * target_logp).mean()
        baseline_loss = 0.5 * (targets.vs.T - out.values).pow(2).mean()
        loss = pg_loss + algo.baseline_coef * baseline_loss - algo.entropy_coef * entropy

        # optimize
        grad_norm = self.step(loss)
        self.scheduler.step()
        self.updates += 1

        values = torch.stack([loss, pg_loss, baseline_loss, entropy, grad_norm]).detach().tolist()
        names = ["loss", "pg_loss", "baseline_loss", "entropy", "grad_norm"]
        metrics = {f"learner/{name}": value for name, value in zip(names, values, strict=True)}
        metrics["learner/lr"] = self.scheduler.get_last_lr()[0]
        return UpdateResult(metrics=metrics)


ALGORITHM = Algorithm(
    name="impala",
    config_class=ImpalaConfig,
    family=ON_POLICY,
    make_policy=make_actor_critic_policy,
    make_learner=ImpalaLearner,
)
