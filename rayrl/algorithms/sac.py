"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications")
for continuous actions, in the off-policy family.

A squashed Gaussian actor (tanh of a Gaussian sample, scaled to the action space's bounds),
twin Q critics with Polyak-averaged target networks, the clipped double-Q soft target, and
an automatically tuned entropy temperature (or a fixed one). The actor and the temperature
may be updated every `actor_update_interval` critic updates, each time that many steps
(CleanRL's delayed updates, so that they take as many steps as the critics). Each part has
its own optimizer and learning rate, built and stepped through `TorchLearner`, so each gets
the non-finite guard, gradient clipping and its configured settings on restore.

The losses are the paper's: each critic's 0.5 * (Q - target)^2 (weighted by the replay's
importance weights), summed over the two critics; the actor's alpha * log pi - min Q; the
temperature's -alpha * (log pi + target entropy). Workers sample from the actor (uniformly
random actions for the run's first `random_env_steps`); evaluation takes the squashed mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rayrl.algorithms.action_spaces import algorithms_for
from rayrl.algorithms.networks import MLPTorso, load_numpy_state_dict
from rayrl.algorithms.torch_learner import Checkpointed, TorchLearner
from rayrl.config import Config, LearnerConfig, RunConfig
from rayrl.contract import Acting, Algorithm
from rayrl.core import ModelInfo, PolicyOutput, TransitionBatch, UpdateResult
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError
from rayrl.families.off_policy import OFF_POLICY, OffPolicyConfig
from rayrl.seeding import derive_seed
from rayrl.strict import bounded

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
"""The actor's log-std is squashed into this range (CleanRL's and SpinningUp's bounds)."""
TANH_EPSILON = 1e-6
"""Keeps log(1 - tanh(u)^2) finite where the squashed action saturates."""


@dataclass(frozen=True)
class SACConfig(OffPolicyConfig):
    """SAC's own settings; replay, n-step and chunking come from the off-policy family."""

    name: str = "sac"
    hidden_sizes: tuple[int, ...] = bounded((256, 256), ge=1)
    """Hidden layers of the actor and of each critic (the paper's 256 x 256)."""
    n_step: int = bounded(1, ge=1)
    """Steps summed before bootstrapping (the paper's 1)."""
    actor_lr: float | None = bounded(None, gt=0.0)
    """The actor's learning rate; None uses `learner.lr`."""
    critic_lr: float | None = bounded(None, gt=0.0)
    """The critics' learning rate; None uses `learner.lr`."""
    alpha_lr: float | None = bounded(None, gt=0.0)
    """The temperature's learning rate; None uses `learner.lr`."""
    tau: float = bounded(0.005, gt=0.0, le=1.0)
    """Polyak factor of the target critics, updated after every critic step."""
    actor_update_interval: int = bounded(1, ge=1)
    """Update the actor and the temperature every this many updates, that many steps each
    time (1: every update, as the paper and SB3; CleanRL uses 2)."""
    autotune_alpha: bool = True
    """Tune the temperature towards `target_entropy`; false keeps it at `initial_alpha`."""
    initial_alpha: float = bounded(1.0, gt=0.0)
    """The temperature at the start (SB3's and CleanRL's 1.0), or always when not tuned."""
    target_entropy: float | None = None
    """The entropy the temperature aims at; None is minus the action dimension (the
    paper's heuristic)."""
    random_env_steps: int = bounded(0, ge=0)
    """Workers act uniformly at random for the run's first this many env steps (CleanRL's
    `learning_starts` does both this and the replay warm-up)."""

    def check(self, config: Config) -> None:
        super().check(config)
        if config.learner.num_learners > 1:
            raise ConfigError(
                f"learner.num_learners={config.learner.num_learners}: SAC trains with one "
                "learner (its actor loss flows through critics it does not step, which "
                "gradient all-reduce does not allow); use learner.num_learners=1"
            )
        if self.network not in ("auto", "mlp"):
            raise ConfigError(
                f"algorithm.network={self.network!r}: SAC's actor and critics are MLPs; "
                "valid: 'auto' or 'mlp'"
            )


def _action_bounds(spec: EnvSpec) -> spaces.Box:
    space = spec.action_space
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        raise ConfigError(
            f"algorithm.name='sac' needs a 1-D Box action space; this env has {space}: "
            f"{algorithms_for(space)}"
        )
    if spec.action_mask is not None:
        raise ConfigError(
            "algorithm.name='sac' does not honour the observations' action_mask (a mask "
            "is for discrete actions); use an algorithm that does (appo, impala, ppo)"
        )
    if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
        raise ConfigError(
            f"algorithm.name='sac' squashes actions into the action space's bounds; this "
            f"env's are not finite ({space})"
        )
    return space


class SquashedGaussianActor(nn.Module):
    """An MLP giving a Gaussian's mean and log-std; actions are tanh of a sample, scaled
    from [-1, 1] to the action space's bounds."""

    action_scale: torch.Tensor
    action_bias: torch.Tensor

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Box,
        hidden: tuple[int, ...],
    ) -> None:
        super().__init__()
        self.torso = MLPTorso(math.prod(observation_space.shape or (1,)), hidden)
        size = action_space.shape[0]
        self.mean = nn.Linear(self.torso.out_features, size)
        self.log_std = nn.Linear(self.torso.out_features, size)
        # copies: a space that came through Ray's object store holds read-only arrays,
        # which `torch.as_tensor` would share with a warning
        low = torch.tensor(action_space.low, dtype=torch.float32)
        high = torch.tensor(action_space.high, dtype=torch.float32)
        self.register_buffer("action_scale", (high - low) / 2)
        self.register_buffer("action_bias", (high + low) / 2)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.torso(obs)
        log_std = torch.tanh(self.log_std(features))
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (log_std + 1)
        return self.mean(features), log_std

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterized action and its log-probability (the tanh and scale's change of
        variables included)."""
        mean, log_std = self(obs)
        std = log_std.exp()
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        pre_tanh = mean + std * noise
        squashed = torch.tanh(pre_tanh)
        log_prob = torch.distributions.Normal(mean, std).log_prob(pre_tanh)
        log_prob = log_prob - torch.log(self.action_scale * (1 - squashed.pow(2)) + TANH_EPSILON)
        return squashed * self.action_scale + self.action_bias, log_prob.sum(-1)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The squashed mean: the deterministic action evaluation takes."""
        mean, _ = self(obs)
        return torch.tanh(mean) * self.action_scale + self.action_bias


class TwinQ(nn.Module):
    """Two independent Q(s, a) MLPs over the flattened observation and the action."""

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Box,
        hidden: tuple[int, ...],
    ) -> None:
        super().__init__()
        inputs = math.prod(observation_space.shape or (1,)) + action_space.shape[0]
        self.q1 = nn.Sequential(MLPTorso(inputs, hidden), nn.Linear(_last(hidden, inputs), 1))
        self.q2 = nn.Sequential(MLPTorso(inputs, hidden), nn.Linear(_last(hidden, inputs), 1))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        inputs = torch.cat([obs.flatten(1).float(), actions], dim=1)
        return self.q1(inputs).squeeze(-1), self.q2(inputs).squeeze(-1)


def _last(hidden: tuple[int, ...], inputs: int) -> int:
    return hidden[-1] if hidden else inputs


class SACPolicy:
    """Samples from a CPU copy of the actor; evaluation takes the squashed mean."""

    def __init__(
        self,
        actor: SquashedGaussianActor,
        action_space: spaces.Box,
        random_env_steps: int,
        seed: int,
    ) -> None:
        self.actor = actor.eval()
        self.action_space = action_space
        self.random_env_steps = random_env_steps
        self.generator = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.version = 0

    def act(
        self,
        obs: np.ndarray,
        episode_starts: np.ndarray,
        *,
        explore: bool,
        env_steps: int = 0,
    ) -> PolicyOutput:
        if explore and env_steps < self.random_env_steps:
            low, high = self.action_space.low, self.action_space.high
            actions = self.rng.uniform(low, high, size=(len(obs), *low.shape))
            return PolicyOutput(actions=actions.astype(np.float32))
        with torch.inference_mode():
            observations = torch.from_numpy(obs)
            if explore:
                chosen, _ = self.actor.sample(observations, self.generator)
            else:
                chosen = self.actor.mode(observations)
        return PolicyOutput(actions=chosen.numpy())

    def set_weights(self, info: ModelInfo) -> None:
        load_numpy_state_dict(self.actor, info.weights)
        self.version = info.version


def make_policy(algo: SACConfig, spec: EnvSpec, acting: Acting) -> SACPolicy:
    bounds = _action_bounds(spec)
    actor = SquashedGaussianActor(spec.observation_space, bounds, algo.hidden_sizes)
    return SACPolicy(actor, bounds, algo.random_env_steps, seed=acting.seed)


class SACLearner(TorchLearner):
    """The actor, the twin critics and their targets, the temperature, an optimizer for
    each, and the update."""

    def __init__(
        self, algo: SACConfig, spec: EnvSpec, settings: LearnerConfig, run: RunConfig
    ) -> None:
        super().__init__(settings, derive_seed(run.seed, "learner"))
        self.algo = algo
        bounds = _action_bounds(spec)
        hidden = algo.hidden_sizes
        self.actor = self.acting_network = SquashedGaussianActor(
            spec.observation_space, bounds, hidden
        ).to(self.device)
        self.critics = TwinQ(spec.observation_space, bounds, hidden).to(self.device)
        self.target_critics = TwinQ(spec.observation_space, bounds, hidden).to(self.device)
        self.target_critics.load_state_dict(self.critics.state_dict())
        self.target_critics.requires_grad_(False)
        self.log_alpha = nn.Parameter(
            torch.tensor(math.log(algo.initial_alpha), device=self.device)
        )
        self.target_entropy = (
            -float(bounds.shape[0]) if algo.target_entropy is None else algo.target_entropy
        )
        self.actor_optimizer = self.make_optimizer(self.actor.parameters(), algo.actor_lr)
        self.critic_optimizer = self.make_optimizer(self.critics.parameters(), algo.critic_lr)
        self.alpha_optimizer = self.make_optimizer([self.log_alpha], algo.alpha_lr)
        self.generator = torch.Generator(self.device).manual_seed(
            derive_seed(run.seed, "learner", 1)
        )

    def components(self) -> dict[str, Checkpointed]:
        return {
            "actor": self.actor,
            "critics": self.critics,
            "target_critics": self.target_critics,
            "log_alpha": _ParameterState(self.log_alpha),
            "actor_optimizer": self.actor_optimizer,
            "critic_optimizer": self.critic_optimizer,
            "alpha_optimizer": self.alpha_optimizer,
        }

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def critic_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The summed critics' loss and each transition's |TD error| (the mean over the
        two critics, for prioritized replay)."""
        with torch.no_grad():
            next_actions, next_logp = self.actor.sample(batch["next_obs"], self.generator)
            next_q = torch.min(*self.target_critics(batch["next_obs"], next_actions))
            soft_value = next_q - self.alpha * next_logp
            targets = batch["rewards"] + batch["discounts"] * soft_value
        q1, q2 = self.critics(batch["obs"], batch["actions"])
        squared = 0.5 * ((q1 - targets).pow(2) + (q2 - targets).pow(2))
        loss = (batch["weights"] * squared).mean()
        td_errors = 0.5 * ((q1 - targets).abs() + (q2 - targets).abs())
        return loss, td_errors.detach()

    def actor_loss(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's loss and the log-probabilities of its fresh actions."""
        actions, logp = self.actor.sample(obs, self.generator)
        # the critics pass the gradient on to the actions without computing their own
        self.critics.requires_grad_(False)
        try:
            q = torch.min(*self.critics(obs, actions))
        finally:
            self.critics.requires_grad_(True)
        return (self.alpha * logp - q).mean(), logp.detach()

    def alpha_loss(self, logp: torch.Tensor) -> torch.Tensor:
        return (-self.log_alpha.exp() * (logp + self.target_entropy)).mean()

    def update(self, batch: TransitionBatch) -> UpdateResult:
        tensors = {
            "obs": self.tensor(batch.obs),
            "next_obs": self.tensor(batch.next_obs),
            "actions": self.tensor(batch.actions).float(),
            "rewards": self.tensor(batch.rewards),
            "discounts": self.tensor(batch.discounts),
            "weights": self.tensor(batch.weights),
        }
        critic_loss, td_errors = self.critic_loss(tensors)
        grad_norm = self.step(critic_loss, self.critic_optimizer, self.critics.parameters())
        with torch.no_grad():
            for target, online in zip(
                self.target_critics.parameters(), self.critics.parameters(), strict=True
            ):
                target.lerp_(online, self.algo.tau)

        metrics = {"critic_loss": critic_loss.detach(), "critic_grad_norm": grad_norm.detach()}
        interval = self.algo.actor_update_interval
        if self.updates % interval == 0:
            for _ in range(interval):
                loss, logp = self.actor_loss(tensors["obs"])
                actor_norm = self.step(loss, self.actor_optimizer, self.actor.parameters())
                metrics |= {"actor_loss": loss.detach(), "actor_grad_norm": actor_norm.detach()}
                metrics["entropy"] = -logp.mean()
                if self.algo.autotune_alpha:
                    alpha_loss = self.alpha_loss(logp)
                    alpha_norm = self.step(alpha_loss, self.alpha_optimizer, [self.log_alpha])
                    metrics["alpha_loss"] = alpha_loss.detach()
                    metrics["alpha_grad_norm"] = alpha_norm.detach()
        self.updates += 1
        metrics["alpha"] = self.alpha

        names = list(metrics)
        values = torch.stack([metrics[name].float() for name in names]).tolist()
        priorities = td_errors.cpu().numpy() if self.algo.replay.prioritized else None
        return UpdateResult(
            metrics={f"learner/{name}": value for name, value in zip(names, values, strict=True)},
            priorities=priorities,
        )


class _ParameterState:
    """A lone parameter (the temperature's log) as a checkpoint component."""

    def __init__(self, parameter: nn.Parameter) -> None:
        self.parameter = parameter

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"value": self.parameter.detach().clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            self.parameter.copy_(state["value"])


ALGORITHM = Algorithm(
    config_class=SACConfig,
    family=OFF_POLICY,
    make_policy=make_policy,
    make_learner=SACLearner,
)
