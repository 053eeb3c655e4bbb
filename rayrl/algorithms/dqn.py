"""DQN with the Rainbow-era options that matter on one GPU or many CPUs (Ape-X).

Double Q-learning, a dueling head, n-step targets (the off-policy family's processor),
prioritized replay, Huber loss, Adam, gradient clipping, hard or soft (Polyak) target
updates. Workers explore epsilon-greedily, either on a schedule decaying with the run's env
steps or with Ape-X's fixed per-env epsilons (each env slot of the fleet plays the role of
one Ape-X actor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces

from rayrl.algorithms.action_spaces import algorithms_for
from rayrl.algorithms.exploration import apex_epsilons, linear_epsilon
from rayrl.algorithms.networks import QNetwork, load_numpy_state_dict, make_torso
from rayrl.algorithms.torch_learner import Checkpointed, TorchLearner
from rayrl.config import LearnerConfig, RunConfig
from rayrl.contract import Acting, Algorithm
from rayrl.core import ModelInfo, PolicyOutput, TransitionBatch, UpdateResult
from rayrl.envs.spec import EnvSpec
from rayrl.errors import ConfigError
from rayrl.families.off_policy import OFF_POLICY, OffPolicyConfig
from rayrl.seeding import derive_seed
from rayrl.strict import bounded


@dataclass(frozen=True)
class DQNConfig(OffPolicyConfig):
    """DQN and its extensions."""

    name: str = "dqn"
    dueling: bool = False
    """Dueling head: Q = V + A - mean(A)."""
    double_q: bool = True
    """Double DQN: the online network picks the bootstrap action, the target network values it."""
    huber_delta: float = bounded(1.0, gt=0.0)
    """Huber loss threshold between quadratic and linear."""
    target_update_every: int = bounded(500, ge=1)
    """Update the target network every this many learner updates."""
    target_update_tau: float = bounded(1.0, gt=0.0, le=1.0)
    """Each target update sets target = tau * online + (1 - tau) * target; 1 is a hard copy."""
    exploration: Literal["schedule", "apex"] = "schedule"
    """"schedule": epsilon decays linearly with the run's env steps, the same for every env;
    "apex": env slot i of N over all workers keeps eps**(1 + alpha * i / (N - 1))."""
    epsilon_start: float = bounded(1.0, ge=0.0, le=1.0)
    """Schedule: epsilon at the first step."""
    epsilon_end: float = bounded(0.05, ge=0.0, le=1.0)
    """Schedule: epsilon after the decay."""
    epsilon_decay_env_steps: int = bounded(50_000, ge=1)
    """Schedule: env steps over which epsilon decays."""
    apex_epsilon: float = bounded(0.4, ge=0.0, le=1.0)
    """Ape-X: base epsilon."""
    apex_alpha: float = bounded(7.0, ge=0.0)
    """Ape-X: how fast epsilons shrink across env slots."""
    eval_epsilon: float = bounded(0.05, ge=0.0, le=1.0)
    """Epsilon of the evaluation policy: 0.05 is Nature DQN's evaluation protocol (0.001
    Dopamine's and Rainbow's; 0 is greedy)."""


def _num_actions(spec: EnvSpec) -> int:
    if not isinstance(spec.action_space, spaces.Discrete):
        raise ConfigError(
            f"algorithm.name='dqn' needs a discrete action space; this env has "
            f"{spec.action_space}: {algorithms_for(spec.action_space)}"
        )
    if spec.action_mask is not None:
        raise ConfigError(
            "algorithm.name='dqn' does not honour the observations' action_mask; use an "
            "algorithm that does (appo, impala, ppo)"
        )
    return int(spec.action_space.n)


def make_q_network(algo: DQNConfig, spec: EnvSpec) -> QNetwork:
    torso = make_torso(algo.network, spec.observation_space, algo.hidden_sizes)
    return QNetwork(torso, _num_actions(spec), algo.dueling)


class DQNPolicy:
    """Epsilon-greedy over a CPU copy of the Q-network."""

    def __init__(
        self,
        network: QNetwork,
        num_actions: int,
        epsilon: float | np.ndarray,
        schedule: tuple[float, float, int] | None,
        eval_epsilon: float,
        seed: int,
    ) -> None:
        self.network = network.eval()
        self.num_actions = num_actions
        self.fixed_epsilon = epsilon
        self.schedule = schedule
        self.eval_epsilon = eval_epsilon
        self.rng = np.random.default_rng(seed)
        self.version = 0

    def epsilon(self, env_steps: int) -> float | np.ndarray:
        """Exploring epsilon(s): from the schedule, or fixed (per env for Ape-X)."""
        if self.schedule is not None:
            return linear_epsilon(env_steps, *self.schedule)
        return self.fixed_epsilon

    def act(
        self,
        obs: np.ndarray,
        episode_starts: np.ndarray,
        *,
        explore: bool,
        env_steps: int = 0,
    ) -> PolicyOutput:
        with torch.inference_mode():
            greedy = self.network(torch.from_numpy(obs)).argmax(dim=1).numpy()
        epsilon = self.epsilon(env_steps) if explore else self.eval_epsilon
        if np.all(np.asarray(epsilon) == 0.0):
            return PolicyOutput(actions=greedy)
        random = self.rng.random(len(greedy)) < epsilon
        actions = np.where(random, self.rng.integers(self.num_actions, size=len(greedy)), greedy)
        return PolicyOutput(actions=actions)

    def set_weights(self, info: ModelInfo) -> None:
        load_numpy_state_dict(self.network, info.weights)
        self.version = info.version


def make_policy(algo: DQNConfig, spec: EnvSpec, acting: Acting) -> DQNPolicy:
    epsilon: float | np.ndarray = algo.eval_epsilon
    schedule = None
    if not acting.evaluation and algo.exploration == "apex":
        fleet = apex_epsilons(acting.fleet_envs, algo.apex_epsilon, algo.apex_alpha)
        epsilon = fleet[acting.env_slots.start : acting.env_slots.stop]
    elif not acting.evaluation:
        schedule = (algo.epsilon_start, algo.epsilon_end, algo.epsilon_decay_env_steps)
    return DQNPolicy(
        make_q_network(algo, spec),
        _num_actions(spec),
        epsilon,
        schedule,
        algo.eval_epsilon,
        seed=acting.seed,
    )


class DQNLearner(TorchLearner):
    """The online and target Q-networks, their optimizer, and the update."""

    def __init__(
        self, algo: DQNConfig, spec: EnvSpec, settings: LearnerConfig, run: RunConfig
    ) -> None:
        super().__init__(settings, derive_seed(run.seed, "learner"))
        self.algo = algo
        self.online = self.acting_network = make_q_network(algo, spec).to(self.device)
        self.wrapped_network = self.all_reduced(self.online)
        self.target = make_q_network(algo, spec).to(self.device)
        self.target.load_state_dict(self.online.state_dict())
        self.target.requires_grad_(False)
        self.optimizer = self.make_optimizer(self.online.parameters())

    def components(self) -> dict[str, Checkpointed]:
        return {"online": self.online, "target": self.target, "optimizer": self.optimizer}

    def update(self, batch: TransitionBatch) -> UpdateResult:
        obs = self.tensor(batch.obs)
        next_obs = self.tensor(batch.next_obs)
        actions = self.tensor(batch.actions).long()
        rewards = self.tensor(batch.rewards)
        discounts = self.tensor(batch.discounts)

        # n-step double-Q targets
        with torch.no_grad():
            next_q_target = self.target(next_obs)
            chooser = self.online(next_obs) if self.algo.double_q else next_q_target
            next_actions = chooser.argmax(dim=1, keepdim=True)
            next_q = next_q_target.gather(1, next_actions).squeeze(1)
            targets = rewards + discounts * next_q

        # Huber loss on the taken actions, importance-weighted when replay is prioritized
        # (uniform replay's weights are all one: the plain mean, a few percent faster)
        q = self.wrapped_network(obs).gather(1, actions[:, None]).squeeze(1)
        delta = self.algo.huber_delta
        if self.algo.replay.prioritized:
            losses = F.huber_loss(q, targets, reduction="none", delta=delta)
            loss = (self.tensor(batch.weights) * losses).mean()
        else:
            loss = F.huber_loss(q, targets, delta=delta)

        # optimize
        grad_norm = self.step(loss, self.optimizer, self.online.parameters())
        self.updates += 1
        if self.updates % self.algo.target_update_every == 0:
            self._update_target()

        loss_value, q_mean, grad_value = torch.stack(
            [loss.detach(), q.detach().mean(), grad_norm.detach()]
        ).tolist()
        priorities = None
        if self.algo.replay.prioritized:
            priorities = (targets - q).detach().abs().cpu().numpy()
        return UpdateResult(
            metrics={
                "learner/loss": loss_value,
                "learner/q_mean": q_mean,
                "learner/grad_norm": grad_value,
            },
            priorities=priorities,
        )

    def _update_target(self) -> None:
        tau = self.algo.target_update_tau
        if tau >= 1.0:
            self.target.load_state_dict(self.online.state_dict())
            return
        with torch.no_grad():
            for target, online in zip(
                self.target.parameters(), self.online.parameters(), strict=True
            ):
                target.lerp_(online, tau)

    def set_policy_weights(self, info: ModelInfo) -> None:
        """Start from these Q-network weights, the target network too (a warm start; the
        optimizer starts fresh)."""
        super().set_policy_weights(info)
        self.target.load_state_dict(self.online.state_dict())


ALGORITHM = Algorithm(
    config_class=DQNConfig,
    family=OFF_POLICY,
    make_policy=make_policy,
    make_learner=DQNLearner,
)
