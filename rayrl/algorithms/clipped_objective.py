"""The clipped surrogate objective that PPO and APPO share: its config, its loss, and the
learner that runs `epochs` passes of `num_minibatches` minibatches of it over each batch.

What each algorithm learns from (advantages, value targets, the log-probabilities the ratio
is taken against) is its own `columns`: PPO's GAE once per update (`rayrl.algorithms.ppo`),
APPO's V-trace before each pass (`rayrl.algorithms.appo`). A recurrent network
(`algorithm.lstm_size`) is trained on minibatches of whole unrolls, whose states it
recomputes in every epoch from the state each unroll's first step was acted from (as
CleanRL's ppo_atari_lstm.py and sb3-contrib's RecurrentPPO do); a feed-forward one on
minibatches of single steps. With several agents per env, an idle agent's steps are left
out of every term of the loss (`ACTIVE_EXTRA`).

The loss is a mean over each minibatch, the scale of the reference implementations
(OpenAI baselines' ppo2, CleanRL's ppo.py, Stable-Baselines3), so their hyperparameters
mean here what they mean there.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

from rayrl.algorithms.actor_critic import State, make_actor_critic, unroll_state
from rayrl.algorithms.torch_learner import Checkpointed, TorchLearner, linear_decay
from rayrl.config import Config, LearnerConfig, RunConfig
from rayrl.core import Unrolls, UpdateResult
from rayrl.envs.adapter import ACTIVE_EXTRA
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError
from rayrl.families.on_policy import OnPolicyConfig, budget_lr, planned_updates, policy_lag
from rayrl.seeding import derive_seed
from rayrl.strict import bounded


@dataclass(frozen=True)
class ClippedObjectiveConfig(OnPolicyConfig):
    """What PPO and APPO share: passes of minibatches over each batch of unrolls, each
    minimizing a clipped surrogate, a value loss and an entropy bonus."""

    epochs: int = bounded(4, ge=1)
    """Passes over each batch."""
    num_minibatches: int = bounded(4, ge=1)
    """Minibatches per pass; a batch holds learner.batch_size x steps_per_chunk samples."""
    clip_coef: float = bounded(0.2, gt=0.0)
    """The surrogate's clip range [1 - clip, 1 + clip]: a sample whose ratio is past it on
    the side its advantage favours gives no gradient."""
    clip_anneal: bool = False
    """Anneal the clip range linearly to 0 over `run.total_env_steps`."""
    value_clip: float | None = bounded(None, gt=0.0)
    """Clip each value prediction to this distance from its value before the update (the
    baselines' `cliprange_vf`); None does not clip."""
    normalize_advantages: bool = True
    """Normalise the advantages of each minibatch to mean 0 and standard deviation 1."""
    value_coef: float = bounded(0.5, ge=0.0)
    """Weight of the value loss, 0.5 (V - R)^2."""
    entropy_coef: float = bounded(0.0, ge=0.0)
    """Weight of the entropy bonus (at the start of the run when `entropy_coef_final` is
    set)."""
    entropy_coef_final: float | None = bounded(None, ge=0.0)
    """Move the entropy bonus's weight linearly from `entropy_coef` to this over
    `run.total_env_steps`: a larger bonus early keeps a policy exploring while it has not
    found what pays, a smaller one late lets it commit. None keeps `entropy_coef`."""
    lr_decay: bool = True
    """Anneal the learning rate linearly to 0 over `run.total_env_steps`."""

    def check(self, config: Config) -> None:
        super().check(config)
        if self.lstm_size is not None and config.learner.batch_size % self.num_minibatches:
            raise ConfigError(
                f"algorithm.num_minibatches={self.num_minibatches} does not divide the "
                f"learner.batch_size={config.learner.batch_size} unrolls of a batch: a "
                "recurrent network (algorithm.lstm_size) is trained on minibatches of whole "
                "unrolls"
            )
        samples = config.learner.batch_size * self.steps_per_chunk
        if samples % self.num_minibatches:
            raise ConfigError(
                f"algorithm.num_minibatches={self.num_minibatches} does not divide the "
                f"{samples} samples of a batch (learner.batch_size x algorithm.steps_per_chunk = "
                f"{config.learner.batch_size} x {self.steps_per_chunk}) into equal minibatches"
            )


@dataclass
class PPOLoss:
    """The loss of a minibatch (`loss`, what is minimized) and its parts."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_fraction: torch.Tensor


def ppo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    behaviour_weights: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip: float,
    value_clip: float | None,
    value_coef: float,
    entropy_coef: float,
    normalize: bool,
    clip_low: float | None = None,
    ratio_limits: tuple[float, float] | None = None,
    active: torch.Tensor | None = None,
) -> PPOLoss:
    """The PPO loss of one minibatch (all arguments 1-D over its samples), a mean over it:
    -w min(r A, clip(r, clip_low, 1 + clip) A) + value_coef * 0.5 (V - R)^2 (or its
    clipped pessimum) - entropy_coef * H, with r = exp(logp - old_logp), `old_logp` the
    policy the ratio is taken against, w the `behaviour_weights` (1 for fresh samples) and
    `clip_low` 1 - clip unless given. `ratio_limits` clamps r first (no gradient outside).
    `active` (1 or 0 per sample; None: all 1) leaves the 0 samples out of every mean, the
    advantages' normalisation included: an idle agent's steps."""
    count = torch.ones(()) if active is None else active.sum().clamp(min=1.0)

    def mean(values: torch.Tensor) -> torch.Tensor:
        return values.mean() if active is None else (values * active).sum() / count

    if normalize and active is None and len(advantages) > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    elif normalize and active is not None and float(count) > 1:
        centred = advantages - mean(advantages)
        std = (mean(centred.pow(2)) * count / (count - 1)).sqrt()  # unbiased, as torch.std
        advantages = centred / (std + 1e-8)
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    if ratio_limits is not None:
        ratio = ratio.clamp(*ratio_limits)
    low = 1.0 - clip if clip_low is None else clip_low
    clipped_ratio = ratio.clamp(low, 1.0 + clip)
    surrogate = torch.maximum(-advantages * ratio, -advantages * clipped_ratio)
    pg_loss = mean(behaviour_weights * surrogate)
    value_error = (values - returns).pow(2)
    if value_clip is not None:
        clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
        value_error = torch.maximum(value_error, (clipped - returns).pow(2))
    value_loss = 0.5 * mean(value_error)
    mean_entropy = mean(entropy)
    with torch.no_grad():
        approx_kl = mean((log_ratio.exp() - 1.0) - log_ratio)  # of the unbounded ratio
        clip_fraction = mean(((ratio < low) | (ratio > 1.0 + clip)).float())
    return PPOLoss(
        loss=pg_loss + value_coef * value_loss - entropy_coef * mean_entropy,
        pg_loss=pg_loss,
        value_loss=value_loss,
        entropy=mean_entropy,
        approx_kl=approx_kl,
        clip_fraction=clip_fraction,
    )


@dataclass
class Minibatching:
    """N sequences of L steps that minibatches are drawn from: B unrolls of T steps, or
    B*T single steps."""

    obs: torch.Tensor
    """(N, L, *obs_shape)."""
    starts: torch.Tensor
    """bool (N, L): episode starts, where a recurrent core starts afresh."""
    state: State | None
    """A recurrent network's state before each sequence, each (N, state width)."""
    columns: dict[str, torch.Tensor]
    """Per-step values, each (N, L, ...)."""


class ClippedObjectiveLearner(TorchLearner):
    """The actor-critic network, its optimizer, and per update `epochs` passes of
    minibatches of a clipped surrogate. What the minibatches learn from (advantages, value
    targets, the log-probabilities the ratio is taken against) is each algorithm's
    `columns`: computed once per update (PPO), or again before each pass
    (`targets_each_pass`, APPO)."""

    targets_each_pass = False
    """Recompute `columns` before every pass with the network as it is then."""
    ratio_limits: tuple[float, float] | None = None
    """Bounds of the probability ratio before it is clipped (None: unbounded)."""

    def __init__(
        self,
        algo: ClippedObjectiveConfig,
        spec: EnvSpec,
        settings: LearnerConfig,
        run: RunConfig,
    ) -> None:
        seed = derive_seed(run.seed, "learner")
        super().__init__(settings, seed)
        self.algo = algo
        self.network = self.acting_network = make_actor_critic(algo, spec).to(self.device)
        self.wrapped_network = self.all_reduced(self.network)
        self.optimizer = self.make_optimizer(
            self.network.parameters(), budget_lr(algo, settings, run)
        )
        self.total_updates = planned_updates(algo, settings, run, spec)
        self.scheduler = linear_decay(self.optimizer, self.total_updates, algo.lr_decay)
        self.shuffle = torch.Generator().manual_seed(seed)

    def components(self) -> dict[str, Checkpointed]:
        return {"network": self.network, "optimizer": self.optimizer, "scheduler": self.scheduler}

    @property
    def clip(self) -> float:
        """The clip range now (annealed with the updates when `clip_anneal`)."""
        final = 0.0 if self.algo.clip_anneal else self.algo.clip_coef
        return self.annealed(self.algo.clip_coef, final)

    def clip_low(self, clip: float) -> float:
        """The lower end of the clipped ratio's range: 1 - clip."""
        return 1.0 - clip

    @property
    def entropy_coef(self) -> float:
        """The entropy bonus's weight now (annealed with the updates when
        `entropy_coef_final` is set)."""
        final = self.algo.entropy_coef_final
        return self.annealed(
            self.algo.entropy_coef, self.algo.entropy_coef if final is None else final
        )

    def annealed(self, start: float, final: float) -> float:
        """A setting moved linearly from `start` to `final` over the run's planned updates,
        at the update the learner takes next (`final` from the last one on)."""
        progress = min(1.0, self.updates / self.total_updates)
        return start + (final - start) * progress

    @abstractmethod
    def columns(self, batch: Unrolls) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """What the minibatches learn from, each (B, T): "actions", "old_logp" (what the
        ratio is taken against), "weights" (each sample's), "advantages", "returns" and
        "old_values" (what a clipped value stays near); and metrics of them."""

    def update(self, batch: Unrolls) -> UpdateResult:
        algo = self.algo
        columns, column_metrics = self.columns(batch)
        active = self.active(batch)
        sequences = self.sequences(batch, {**columns, **active})
        count, clip, entropy_coef = len(sequences.obs), self.clip, self.entropy_coef
        metrics: dict[str, list[torch.Tensor]] = {}
        for epoch in range(algo.epochs):
            if epoch and self.targets_each_pass:
                # new targets; a clipped value stays near its value at the update's start
                fresh = {
                    **self.columns(batch)[0],
                    "old_values": columns["old_values"],
                    **active,
                }
                sequences = self.sequences(batch, fresh)
            order = torch.randperm(count, generator=self.shuffle).to(self.device)
            for minibatch in order.chunk(algo.num_minibatches):
                state = None
                if sequences.state is not None:
                    state = (sequences.state[0][minibatch], sequences.state[1][minibatch])
                out = self.wrapped_network(
                    sequences.obs[minibatch], sequences.starts[minibatch], state
                )
                mb = {
                    name: column[minibatch].flatten(0, 1)
                    for name, column in sequences.columns.items()
                }
                distribution = self.network.distribution(out.head.flatten(0, 1))
                loss = ppo_loss(
                    distribution.log_prob(mb["actions"]),
                    mb["old_logp"],
                    mb["weights"],
                    mb["advantages"],
                    out.values.flatten(),
                    mb["old_values"],
                    mb["returns"],
                    distribution.entropy(),
                    clip=clip,
                    value_clip=algo.value_clip,
                    value_coef=algo.value_coef,
                    entropy_coef=entropy_coef,
                    normalize=algo.normalize_advantages,
                    clip_low=self.clip_low(clip),
                    ratio_limits=self.ratio_limits,
                    active=mb.get(ACTIVE_EXTRA),
                )
                grad_norm = self.step(loss.loss, self.optimizer, self.network.parameters())
                parts = {**vars(loss), "grad_norm": grad_norm}
                for name, value in parts.items():
                    metrics.setdefault(name, []).append(value.detach())
        # the rate this update used (a tensor when the step is compiled)
        lr = float(self.optimizer.param_groups[0]["lr"])
        self.scheduler.step()
        lag = policy_lag(batch, self.updates)
        self.updates += 1

        means = torch.stack([torch.stack(steps).mean() for steps in metrics.values()]).tolist()
        result = {f"learner/{name}": value for name, value in zip(metrics, means, strict=True)}
        result.update(column_metrics)
        result["learner/lr"] = lr
        result["learner/clip"] = clip
        result["learner/entropy_coef"] = entropy_coef
        result["learner/policy_lag"] = lag
        return UpdateResult(metrics=result)

    def active(self, batch: Unrolls) -> dict[str, torch.Tensor]:
        """The `ACTIVE_EXTRA` column (1 where a slot's agent acted) of an env with several
        agents, which the loss leaves the idle steps out of; {} for one agent."""
        if ACTIVE_EXTRA not in batch.extras:
            return {}
        return {ACTIVE_EXTRA: self.tensor(batch.extras[ACTIVE_EXTRA].astype("float32"))}

    def over_active(self, batch: Unrolls, *columns: torch.Tensor) -> list[torch.Tensor]:
        """`columns` (each (B, T)) flattened, without an idle agent's steps: what the
        metrics of a batch average over."""
        if ACTIVE_EXTRA not in batch.extras:
            return [column.flatten() for column in columns]
        keep = self.tensor(batch.extras[ACTIVE_EXTRA])
        return [column[keep] for column in columns]

    def sequences(self, batch: Unrolls, columns: dict[str, torch.Tensor]) -> Minibatching:
        """What minibatches are drawn from: whole unrolls for a recurrent network (it
        replays each from its stored state), single steps otherwise (sequences of one)."""
        obs = self.tensor(batch.obs)[:, :-1]
        starts = self.tensor(batch.episode_starts)[:, :-1]
        if self.network.recurrent:
            return Minibatching(obs, starts, unroll_state(batch, self.tensor), columns)
        return Minibatching(
            obs.flatten(0, 1).unsqueeze(1),
            torch.zeros_like(starts).flatten().unsqueeze(1),
            None,
            {name: column.flatten(0, 1).unsqueeze(1) for name, column in columns.items()},
        )


def explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(target - predicted) / Var(target): how much of the returns' variance the
    value function explains (nan when the returns do not vary)."""
    variance = float(target.var())
    if not np.isfinite(variance) or variance == 0.0:
        return float("nan")
    return 1.0 - float((target - predicted).var()) / variance
