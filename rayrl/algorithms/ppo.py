"""PPO (Schulman et al. 2017): the clipped surrogate objective over minibatch epochs.

On-policy family: workers send unrolls with the behaviour log-probabilities of the policy
version that acted; each learner update is one PPO iteration over a batch of unrolls. It
computes values with the network as it is, then GAE advantages (Schulman et al. 2016;
truncated episodes bootstrap from their true final observation's value, terminated ones do
not), and runs `epochs` passes of `num_minibatches` minibatches of the clipped surrogate,
optionally clipped value loss, and entropy bonus, with per-minibatch advantage
normalisation, gradient-norm clipping, and linear annealing of the learning rate, of the
clip range and of the entropy bonus over the run.

Unrolls may have been acted by weights a few versions older than the learner's
(`max_policy_lag`): the objective is decoupled PPO's (Hilton et al. 2021, "Batch
size-invariance for policy optimization"), which clips the ratio pi / pi_start around the
network as it is at the start of the update and weights each sample by pi_start / pi_acted,
truncated at `max_behaviour_weight` (2 by default). With fresh unrolls
the weight is 1 and this is the original objective.

The objective, its minibatches (recurrent ones too) and its loss scale are
`rayrl.algorithms.clipped_objective`'s, which APPO shares.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rayrl.algorithms.actor_critic import (
    episode_flags,
    forward_unrolls,
    make_actor_critic_policy,
)
from rayrl.algorithms.clipped_objective import (
    ClippedObjectiveConfig,
    ClippedObjectiveLearner,
    explained_variance,
)
from rayrl.contract import Algorithm
from rayrl.core import Unrolls
from rayrl.families.on_policy import ON_POLICY
from rayrl.strict import bounded


@dataclass(frozen=True)
class PPOConfig(ClippedObjectiveConfig):
    """PPO with the clipped surrogate objective."""

    name: str = "ppo"
    steps_per_chunk: int = bounded(128, ge=1)
    """Vector-env steps per worker chunk, one unroll per env: the unroll length."""
    max_policy_lag: int = bounded(4, ge=0)
    """Unrolls acted by weights more than this many versions (updates) older than the
    learner's are dropped and counted instead of learned from."""
    gae_lambda: float = bounded(0.95, ge=0.0, le=1.0)
    """GAE's lambda: 0 is the one-step TD advantage, 1 the Monte Carlo return's."""
    max_behaviour_weight: float = bounded(2.0, gt=0.0)
    """Truncation of each sample's weight pi_start / pi_acted, which corrects unrolls acted
    by older weights than the learner's (1 for fresh ones)."""


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    discounts: torch.Tensor,
    continues: torch.Tensor,
    lam: float,
) -> torch.Tensor:
    """Generalized advantage estimates, time-major (T, B).

    A_t = delta_t + discounts_t * lam * continues_t * A_{t+1}, with
    delta_t = r_t + discounts_t * V(x_{t+1}) - V(x_t). `discounts` is gamma, or 0 after a
    termination; `continues` is 0 after any episode end, so that no advantage flows from the
    next episode into this one; `next_values[t]` is V(x_{t+1}), the true final
    observation's value after a truncation.
    """
    deltas = rewards + discounts * next_values - values
    advantages = torch.zeros_like(values)
    carry = torch.zeros_like(values[0])
    for t in reversed(range(values.shape[0])):
        carry = deltas[t] + discounts[t] * lam * continues[t] * carry
        advantages[t] = carry
    return advantages


@dataclass
class PPOTargets:
    """What an update computes once, before its epochs, each (B, T)."""

    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    logp: torch.Tensor
    """Log-probabilities of the acted actions under the network at the update's start."""


class PPOLearner(ClippedObjectiveLearner):
    """PPO: GAE advantages and returns with the network at the update's start, the ratio
    taken against that network's policy and each sample weighted by it over the acting
    policy (decoupled PPO)."""

    algo: PPOConfig

    def targets(self, batch: Unrolls) -> PPOTargets:
        """Advantages, returns and the policy's log-probabilities with the network as it is
        at the start of the update, each (B, T)."""
        algo = self.algo
        with torch.no_grad():
            out = forward_unrolls(self.network, self.network, batch, self.tensor)
            terminated, ended = episode_flags(batch, self.tensor)
            advantages = gae(
                self.tensor(batch.rewards).T,
                out.values.T,
                out.next_values.T,
                (algo.gamma * (1.0 - terminated)).T,
                (1.0 - ended).T,
                algo.gae_lambda,
            ).T
            logp = self.network.distribution(out.head).log_prob(self.tensor(batch.actions))
        return PPOTargets(out.values, advantages, advantages + out.values, logp)

    def columns(self, batch: Unrolls) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        start = self.targets(batch)
        behaviour_logp = self.tensor(batch.extras["logp"])
        weights = (start.logp - behaviour_logp).exp().clamp(max=self.algo.max_behaviour_weight)
        columns = {
            "actions": self.tensor(batch.actions),
            "old_logp": start.logp,
            "weights": weights,
            "advantages": start.advantages,
            "returns": start.returns,
            "old_values": start.values,
        }
        metrics = {
            "learner/explained_variance": explained_variance(
                *self.over_active(batch, start.values, start.returns)
            ),
            "learner/behaviour_weight": float(self.over_active(batch, weights)[0].mean()),
        }
        return columns, metrics


ALGORITHM = Algorithm(
    config_class=PPOConfig,
    family=ON_POLICY,
    make_policy=make_actor_critic_policy,
    make_learner=PPOLearner,
    several_agents=True,
)
