"""APPO: PPO's clipped surrogate on V-trace targets, for asynchronous workers.

Sample Factory's V-trace mode (Petrenko et al. 2020, `sample_factory/algo/learning/learner.py`
with `with_vtrace`): the probability ratio r = pi / mu is taken against the policy that
acted (mu, from the unroll), bounded to [0.05, 20] and clipped to [1 / (1 + clip), 1 + clip];
before each pass over a batch the network as it is then gives V-trace's value targets v_s
and advantages rho_s (r_s + gamma v_{s+1} - V(x_s)), rho and the traces from the bounded
ratio (the same `vtrace` as IMPALA's, the policy gradient's weight clipped at `rho_clip`,
the traces optionally scaled by a lambda, which Sample Factory does not have),
so that several passes over unrolls a few versions old stay corrected; the advantages are
normalised per minibatch; the value loss may be clipped.

Where rayrl differs from Sample Factory, and why:
- V-trace is recomputed once per pass over the whole batch rather than per minibatch, so
  that a feed-forward network's minibatches can be single steps, as PPO's.
- Episode ends follow rayrl's convention: a truncation bootstraps from its true final
  observation's value and a termination does not, and each unroll bootstraps from its next
  observation's value. Sample Factory treats a truncation as a termination by default and
  gives the last step of each unroll a zero TD error (its bootstrap is inferred from that
  step: (V - r) / gamma).
- A clipped value (`value_clip`, off by default; Sample Factory clips at 1.0 by default)
  stays near its value at the update's start, since rayrl's workers do not compute values
  while acting; Sample Factory's anchor is the value stored by the acting policy.
- No running normalisation of the value targets (Sample Factory's `normalize_returns`);
  `env.normalize.rewards` scales the rewards instead.
- The value loss is 0.5 (V - v)^2, PPO's scale: `value_coef` 1.0 is Sample Factory's
  `value_loss_coeff` 0.5.
The optimizer's settings (rate, epsilon, gradient clip, batch size) are the `learner`
section's, not Sample Factory's.

RLlib's APPO anchors the clip elsewhere: the ratio is taken against a target network
(copied from the learner every few updates), times the acting policy's weight clipped to
[0, 2], and clipped symmetrically; V-trace takes its importance weights from that target
network; a KL term toward it is optional. The target network keeps a lagging sample's
gradient alive where a clip around mu would zero it, at the cost of a second network to
keep, checkpoint and keep in step across learners. Sample Factory's anchor needs neither,
and with workers at most a few updates behind (`algorithm.max_policy_lag`) few samples
start past the clip.
"""

from __future__ import annotations

import math
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
from rayrl.algorithms.vtrace import vtrace
from rayrl.contract import Algorithm
from rayrl.core import Unrolls
from rayrl.families.on_policy import ON_POLICY
from rayrl.strict import bounded

RATIO_LIMITS = (0.05, 20.0)
"""Sample Factory's bounds of the ratio pi / mu: beyond them a sample is far off-policy and
its ratio mostly noise (and, with a negative advantage, an unbounded loss)."""
LOG_RATIO_LIMITS = (math.log(RATIO_LIMITS[0]), math.log(RATIO_LIMITS[1]))


@dataclass(frozen=True)
class APPOConfig(ClippedObjectiveConfig):
    """APPO: the clipped surrogate on V-trace targets. The objective's defaults are Sample
    Factory's in its V-trace mode: clip 0.1, entropy 0.003, one pass of one minibatch,
    32-step unrolls, a constant rate."""

    name: str = "appo"
    steps_per_chunk: int = bounded(32, ge=1)
    """Vector-env steps per worker chunk, one unroll per env: the unroll length."""
    epochs: int = bounded(1, ge=1)
    """Passes over each batch, V-trace recomputed before each."""
    num_minibatches: int = bounded(1, ge=1)
    """Minibatches per pass; a batch holds learner.batch_size x steps_per_chunk samples."""
    clip_coef: float = bounded(0.1, gt=0.0)
    """The surrogate's clip range [1 / (1 + clip), 1 + clip] around the acting policy (Sample
    Factory's `ppo_clip_ratio`, whose lower end stays positive for any clip): a sample whose
    ratio pi / mu is past it on the side its advantage favours gives no gradient."""
    value_coef: float = bounded(1.0, ge=0.0)
    """Weight of the value loss, 0.5 (V - v)^2: 1.0 is Sample Factory's 0.5 on (V - v)^2."""
    entropy_coef: float = bounded(0.003, ge=0.0)
    """Weight of the entropy bonus (at the start of the run when `entropy_coef_final` is
    set)."""
    lr_decay: bool = False
    """Anneal the learning rate linearly to 0 over `run.total_env_steps` (Sample Factory
    keeps it constant)."""
    rho_clip: float = bounded(1.0, gt=0.0)
    """V-trace: clipping of the importance weights in the value targets and in the
    advantages (rho bar)."""
    c_clip: float = bounded(1.0, gt=0.0)
    """V-trace: clipping of the trace coefficients (c bar)."""
    trace_lambda: float = bounded(1.0, ge=0.0, le=1.0)
    """V-trace's lambda, which scales the trace coefficients (c = lambda min(c_bar, rho)):
    1 is Sample Factory's (plain V-trace); on-policy, lambda makes the advantages PPO's
    GAE(lambda) and the value targets its lambda-returns."""


class APPOLearner(ClippedObjectiveLearner):
    """APPO's targets: V-trace with the network as it is before each pass."""

    algo: APPOConfig
    targets_each_pass = True
    ratio_limits = RATIO_LIMITS

    def clip_low(self, clip: float) -> float:
        """1 / (1 + clip): positive for any clip range."""
        return 1.0 / (1.0 + clip)

    def columns(self, batch: Unrolls) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        algo = self.algo
        behaviour_logp = self.tensor(batch.extras["logp"])
        with torch.no_grad():
            out = forward_unrolls(self.network, self.network, batch, self.tensor)
            logp = self.network.distribution(out.head).log_prob(self.tensor(batch.actions))
            log_ratio = (logp - behaviour_logp).clamp(*LOG_RATIO_LIMITS)
            terminated, ended = episode_flags(batch, self.tensor)
            targets = vtrace(
                behaviour_logp.T,
                (behaviour_logp + log_ratio).T,
                self.tensor(batch.rewards).T,
                (algo.gamma * (1.0 - terminated)).T,
                (1.0 - ended).T,
                out.values.T,
                out.next_values.T,
                rho_clip=algo.rho_clip,
                c_clip=algo.c_clip,
                pg_rho_clip=algo.rho_clip,
                trace_lambda=algo.trace_lambda,
            )
        columns = {
            "actions": self.tensor(batch.actions),
            "old_logp": behaviour_logp,
            "weights": torch.ones_like(behaviour_logp),
            "advantages": targets.pg_advantages.T,
            "returns": targets.vs.T,
            "old_values": out.values,
        }
        metrics = {
            "learner/explained_variance": explained_variance(
                *self.over_active(batch, out.values, targets.vs.T)
            ),
            # how far the learner's policy is from the acting one's: mean |pi / mu - 1|
            "learner/ratio_deviation": float(
                (self.over_active(batch, log_ratio)[0].exp() - 1.0).abs().mean()
            ),
        }
        return columns, metrics


ALGORITHM = Algorithm(
    config_class=APPOConfig,
    family=ON_POLICY,
    make_policy=make_actor_critic_policy,
    make_learner=APPOLearner,
    several_agents=True,
)
