"""APPO: PPO's clipped surrogate on V-trace targets, for asynchronous workers.

Sample Factory's formulation (Petrenko et al. 2020, `sample_factory/algo/learning/learner.py`
with `with_vtrace`): the probability ratio r = pi / mu is taken against the policy that
acted (mu, from the unroll), bounded to [0.05, 20] and clipped to [1 / (1 + clip), 1 + clip];
before each pass over a batch the network as it is then gives V-trace's value targets v_s
and advantages rho_s (r_s + gamma v_{s+1} - V(x_s)) (the same `vtrace` as IMPALA's, with
the policy-gradient weight clipped at `rho_clip`), so that several passes over unrolls a
few versions old stay corrected; the advantages are normalised per minibatch; the value
loss may be clipped around the values the pass started from.

Where rayrl differs from Sample Factory: V-trace is recomputed once per pass over the whole
batch rather than per minibatch (minibatches of single steps keep a feed-forward network's
updates as PPO's), it bootstraps each unroll from its true next observation's value (Sample
Factory infers one from the last step), and the value loss is 0.5 (V - v)^2, PPO's scale,
so `value_coef` 1.0 is Sample Factory's `value_loss_coeff` 0.5.

RLlib's APPO differs more: it takes the ratio against a target network updated every few
updates and adds a KL term toward it, with V-trace computed from that target network. The
target network makes the clipped ratio's anchor move slowly whatever the workers' lag; here
the anchor is the acting policy itself, so the clip bounds exactly how far an update moves
the policy from what generated the data, with no extra network to publish, checkpoint and
keep in step across learners.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rayrl.algorithms.actor_critic import (
    episode_flags,
    forward_unrolls,
    make_actor_critic_policy,
)
from rayrl.algorithms.ppo import (
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


@dataclass(frozen=True)
class APPOConfig(ClippedObjectiveConfig):
    """APPO: the clipped surrogate on V-trace targets (Sample Factory's defaults)."""

    name: str = "appo"
    steps_per_chunk: int = bounded(32, ge=1)
    """Vector-env steps per worker chunk, one unroll per env: the unroll length."""
    epochs: int = bounded(1, ge=1)
    """Passes over each batch, V-trace recomputed before each."""
    num_minibatches: int = bounded(1, ge=1)
    """Minibatches per pass; a batch holds learner.batch_size x steps_per_chunk samples."""
    clip_coef: float = bounded(0.1, gt=0.0)
    """The surrogate's clip range: ratios pi / mu outside [1 / (1 + clip), 1 + clip] give
    no gradient (Sample Factory's `ppo_clip_ratio`, whose lower end stays positive for any
    clip)."""
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
            terminated, ended = episode_flags(batch, self.tensor)
            targets = vtrace(
                behaviour_logp.T,
                logp.T,
                self.tensor(batch.rewards).T,
                (algo.gamma * (1.0 - terminated)).T,
                (1.0 - ended).T,
                out.values.T,
                out.next_values.T,
                rho_clip=algo.rho_clip,
                c_clip=algo.c_clip,
                pg_rho_clip=algo.rho_clip,
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
                out.values.flatten(), targets.vs.T.flatten()
            ),
            "learner/behaviour_ratio": float((logp - behaviour_logp).exp().mean()),
        }
        return columns, metrics


ALGORITHM = Algorithm(
    config_class=APPOConfig,
    family=ON_POLICY,
    make_policy=make_actor_critic_policy,
    make_learner=APPOLearner,
)
