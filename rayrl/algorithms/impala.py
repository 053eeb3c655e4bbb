"""IMPALA: on-policy actor-critic from asynchronous actors, corrected with V-trace.

The shared actor-critic (`rayrl.algorithms.actor_critic`), V-trace targets
(`rayrl.algorithms.vtrace`), policy-gradient, baseline and entropy losses, RMSprop or
Adam (`learner.optimizer`), gradient-norm clipping and a linear learning-rate decay.
Truncated episodes bootstrap from their final observation's value; terminated ones do not.
`algorithm.epochs` > 1 makes several gradient steps on each batch, V-trace recomputed for
each (sample reuse, which the paper's learner does not do).
A recurrent network (`algorithm.lstm_size`) is trained over whole unrolls, from the state
each unroll's first step was acted from.

The losses are sums over the unrolls and their steps, as in the reference implementations
(DeepMind's scalable_agent, TorchBeast): the paper's RMSprop epsilon, learning rate and
gradient-norm clip assume gradients of that scale. (A mean over a batch of B unrolls of T
steps would shrink every gradient B*T times, leave RMSprop's denominator to its epsilon and
the clip never binding.) With several learners, each sums over its own batch and their
gradients are averaged, as one learner's would be.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rayrl.algorithms.actor_critic import (
    episode_flags,
    forward_unrolls,
    make_actor_critic,
    make_actor_critic_policy,
)
from rayrl.algorithms.torch_learner import Checkpointed, TorchLearner, linear_decay
from rayrl.algorithms.vtrace import vtrace
from rayrl.config import LearnerConfig, RunConfig
from rayrl.contract import Algorithm
from rayrl.core import Unrolls, UpdateResult
from rayrl.envs.spec import EnvSpec
from rayrl.families.on_policy import (
    ON_POLICY,
    OnPolicyConfig,
    budget_lr,
    planned_updates,
    policy_lag,
)
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
    trace_lambda: float = bounded(1.0, ge=0.0, le=1.0)
    """V-trace's lambda, which scales the trace coefficients (c = lambda min(c_bar, rho)):
    1 is the paper's V-trace, lower values weigh the value's bootstrap more than the
    unroll's later rewards (less variance, more bias)."""
    baseline_coef: float = bounded(0.5, ge=0.0)
    """Weight of the value (baseline) loss."""
    entropy_coef: float = bounded(0.01, ge=0.0)
    """Weight of the entropy bonus."""
    lr_decay: bool = True
    """Decay the learning rate linearly to 0 over `run.total_env_steps`."""
    epochs: int = bounded(1, ge=1)
    """Gradient steps on each batch: 1 is the paper's IMPALA, which learns from each unroll
    once. More replay the batch, each pass recomputing V-trace's targets and importance
    weights with the network as it is then, so that the correction covers the policy's move
    since the unrolls were acted (the sample reuse V-trace allows, as PPO's epochs do for
    its clipped objective). The learning-rate decay counts batches, not passes."""
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
        wrapped = self.all_reduced(self.network)
        self.wrapped_network = torch.compile(wrapped) if algo.compile else wrapped
        self.optimizer = self.make_optimizer(
            self.network.parameters(), budget_lr(algo, settings, run)
        )
        self.scheduler = linear_decay(
            self.optimizer, planned_updates(algo, settings, run, spec), algo.lr_decay
        )

    def components(self) -> dict[str, Checkpointed]:
        return {"network": self.network, "optimizer": self.optimizer, "scheduler": self.scheduler}

    def loss(self, batch: Unrolls) -> dict[str, torch.Tensor]:
        """The loss of a batch and its parts: "loss" is what is minimized."""
        algo = self.algo
        out = forward_unrolls(self.wrapped_network, self.network, batch, self.tensor)
        distribution = self.network.distribution(out.head)
        target_logp = distribution.log_prob(self.tensor(batch.actions))
        entropy = distribution.entropy()
        terminated, ended = episode_flags(batch, self.tensor)

        # V-trace targets (time-major), bootstrapping truncated steps from their final obs
        targets = vtrace(
            self.tensor(batch.extras["logp"]).T,
            target_logp.detach().T,
            self.tensor(batch.rewards).T,
            (algo.gamma * (1.0 - terminated)).T,
            (1.0 - ended).T,
            out.values.detach().T,
            out.next_values.detach().T,
            rho_clip=algo.rho_clip,
            c_clip=algo.c_clip,
            pg_rho_clip=algo.pg_rho_clip,
            trace_lambda=algo.trace_lambda,
        )

        # sums over unrolls and steps, the reference's scale
        pg_loss = -(targets.pg_advantages.T * target_logp).sum()
        baseline_loss = 0.5 * (targets.vs.T - out.values).pow(2).sum()
        entropy_sum = entropy.sum()
        loss = pg_loss + algo.baseline_coef * baseline_loss - algo.entropy_coef * entropy_sum
        return {
            "loss": loss,
            "pg_loss": pg_loss,
            "baseline_loss": baseline_loss,
            "entropy": entropy.mean().detach(),  # per step, to read
        }

    def update(self, batch: Unrolls) -> UpdateResult:
        passes = []
        for _ in range(self.algo.epochs):
            parts = self.loss(batch)
            parts["grad_norm"] = self.step(parts["loss"], self.optimizer, self.network.parameters())
            passes.append(torch.stack(list(parts.values())).detach())
        # the rate this update used (a tensor when the step is compiled)
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.scheduler.step()
        lag = policy_lag(batch, self.updates)
        self.updates += 1

        values = torch.stack(passes).mean(0).tolist()  # each part's mean over the passes
        metrics = {f"learner/{name}": value for name, value in zip(parts, values, strict=True)}
        metrics["learner/lr"] = lr
        metrics["learner/policy_lag"] = lag
        return UpdateResult(metrics=metrics)


ALGORITHM = Algorithm(
    config_class=ImpalaConfig,
    family=ON_POLICY,
    make_policy=make_actor_critic_policy,
    make_learner=ImpalaLearner,
)
