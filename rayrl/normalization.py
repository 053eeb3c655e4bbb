"""Observation normalisation whose running statistics travel with the weights, and reward
normalisation whose statistics stay in the learner.

With `env.normalize.observations`, every network sees observations as
clip((obs - mean) / sqrt(var + eps), -clip, clip) (of a flattened Dict or Tuple
observation, its float parts only: `rayrl.envs.observations`), from running statistics
that exist once, in the learner: `NormalizingLearner` updates them from each batch's raw
observations (the workers' data, before it is normalized for the update), and publishes
them inside the weights (`MOMENTS_PREFIX` keys beside the network's), so that every
worker, the evaluator, each checkpoint (`latest.pt`, `best.pt`), `rayrl evaluate`, a warm
start and a resume see exactly the statistics of the weights they hold.
`NormalizingPolicy` strips them off and normalizes what it acts on.

Why not gymnasium's `NormalizeObservation` wrapper: it keeps statistics per process, so
each worker and the evaluator would normalize differently, and none of them would be in
the checkpoint. The update is the parallel-variance merge (Chan et al.); with several
learners the batch moments are summed over the process group first, so the statistics stay
identical on every learner. Replay samples each transition about `samples_per_insert`
times, so a sampled batch counts as `batch / samples_per_insert` observations, which keeps
the count at about the workers' env steps. The statistics are those of what the learner
samples: the replay's contents (uniform replay weighs older transitions, which stay longer,
a little more than the stream did; prioritized replay leans towards large TD errors), not
exactly the workers' stream. Rows that are not finite (a NaN from a broken env) are left
out, so that one cannot poison the statistics that every later input goes through.

With `env.normalize.rewards` the learner divides each batch's rewards by the standard
deviation of the workers' running discounted returns (not centred), clipped: the scaling of
SB3's VecNormalize and CleanRL's NormalizeReward. The workers' unroll processors track the
returns (`rayrl.processing.RETURN_EXTRA`) and the statistics live once, in the learner,
and in its checkpoints; the policy never sees rewards, so they are not published.

torch is imported where it is used: the experience actor imports this module (through the
contract) and starts without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from rayrl.core import (
    ModelInfo,
    NonFiniteSteps,
    PolicyOutput,
    TransitionBatch,
    Unrolls,
    UpdateResult,
)
from rayrl.envs.adapter import ACTIVE_EXTRA
from rayrl.envs.spec import EnvSpec
from rayrl.processing import RETURN_EXTRA
from rayrl.roles import Learner, Policy

if TYPE_CHECKING:
    import torch

B = TypeVar("B", bound="TransitionBatch | Unrolls")
"""The batches a normalizing learner can normalize."""

RETURN_MOMENTS_KEY = "return_moments"
"""The key of the returns' statistics in a reward-normalizing learner's state."""
MOMENTS_PREFIX = "observation_moments."
"""Weight keys holding the statistics: `<prefix>mean`, `<prefix>var`, `<prefix>count`."""
VARIANCE_EPSILON = 1e-8


class RunningMoments:
    """Mean and variance per observation element over everything seen, in float64."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 0.0

    def update(self, total: np.ndarray, total_sq: np.ndarray, size: float, weight: float) -> None:
        """Merge a batch of `size` observations, given by their element-wise sum and sum of
        squares, counted as `weight` observations each."""
        if size <= 0:
            return
        batch_mean = total / size
        batch_var = np.maximum(total_sq / size - batch_mean**2, 0.0)
        count = size * weight
        merged = self.count + count
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * count / merged
        m2 = self.var * self.count + batch_var * count + delta**2 * self.count * count / merged
        self.var = m2 / merged
        self.count = merged

    def scale(self, values: np.ndarray, clip: float) -> np.ndarray:
        """`values` divided by the standard deviation, not centred (how rewards are scaled:
        centring would turn a task's zero rewards into penalties or bonuses)."""
        scaled = values / np.sqrt(self.var + VARIANCE_EPSILON)
        return np.clip(scaled, -clip, clip).astype(np.float32)

    def normalize(
        self, obs: np.ndarray, clip: float, parts: tuple[tuple[int, int], ...] | None = None
    ) -> np.ndarray:
        """`obs` normalized and clipped; with `parts` (a flattened observation's float
        ranges, `ObservationLayout.float_parts`) only those ranges, the rest as it is."""
        scaled = (obs - self.mean) / np.sqrt(self.var + VARIANCE_EPSILON)
        scaled = np.clip(scaled, -clip, clip).astype(np.float32)
        if parts is None:
            return scaled
        kept = obs.astype(np.float32)
        for start, stop in parts:
            kept[..., start:stop] = scaled[..., start:stop]
        return kept

    def as_weights(self) -> dict[str, np.ndarray]:
        return {
            f"{MOMENTS_PREFIX}mean": np.array(self.mean, np.float64),  # also 0-d (returns)
            f"{MOMENTS_PREFIX}var": np.array(self.var, np.float64),
            f"{MOMENTS_PREFIX}count": np.array(self.count),
        }

    def load(self, weights: dict[str, np.ndarray]) -> None:
        self.mean = np.array(weights[f"{MOMENTS_PREFIX}mean"], np.float64)
        self.var = np.array(weights[f"{MOMENTS_PREFIX}var"], np.float64)
        self.count = float(weights[f"{MOMENTS_PREFIX}count"])


def split_moments(weights: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(the network's weights, the statistics' keys) of published weights."""
    network = {k: v for k, v in weights.items() if not k.startswith(MOMENTS_PREFIX)}
    moments = {k: v for k, v in weights.items() if k.startswith(MOMENTS_PREFIX)}
    return network, moments


def normalization_mismatch(info: ModelInfo, normalized: bool) -> str | None:
    """What is wrong with starting from `info` when the run does (or does not) normalize
    observations, if anything: weights trained on normalized inputs would be fed raw ones,
    or the other way round, and act on inputs they never saw."""
    trained_normalized = any(key.startswith(MOMENTS_PREFIX) for key in info.weights)
    return _setting_mismatch("observations", trained_normalized, normalized)


def _setting_mismatch(what: str, trained_normalized: bool, normalized: bool) -> str | None:
    """The refusal for `env.normalize.<what>` set otherwise than when the model was trained."""
    if trained_normalized == normalized:
        return None
    was, now = ("with", "false") if trained_normalized else ("without", "true")
    key = f"env.normalize.{what}"
    return (
        f"was trained {was} normalized {what}, and {key}={now}; "
        f"set {key}={'true' if trained_normalized else 'false'}"
    )


class NormalizingPolicy:
    """A policy acting on normalized observations, with the statistics of its weights;
    until the first weights with statistics arrive it acts on raw observations."""

    def __init__(self, policy: Policy, spec: EnvSpec) -> None:
        assert spec.observation_clip is not None, "a normalizing policy needs the clip"
        self.policy = policy
        self.clip = spec.observation_clip
        self.parts = None if spec.layout is None else spec.layout.float_parts
        self.moments: RunningMoments | None = None

    @property
    def version(self) -> int:
        return self.policy.version

    def act(
        self,
        obs: np.ndarray,
        episode_starts: np.ndarray,
        *,
        explore: bool,
        env_steps: int = 0,
    ) -> PolicyOutput:
        if self.moments is not None:
            obs = self.moments.normalize(obs, self.clip, self.parts)
        return self.policy.act(obs, episode_starts, explore=explore, env_steps=env_steps)

    def set_weights(self, info: ModelInfo) -> None:
        network, moments = split_moments(info.weights)
        self.policy.set_weights(replace(info, weights=network))
        if moments:
            self.moments = self.moments or RunningMoments(())
            self.moments.load(moments)


def _observation_fields(batch: TransitionBatch | Unrolls) -> tuple[np.ndarray, tuple[str, ...]]:
    """The raw observations a batch adds to the statistics (each env step once, an idle
    agent's steps not at all), and the fields that hold observations."""
    if isinstance(batch, TransitionBatch):
        return batch.obs, ("obs", "next_obs")
    if isinstance(batch, Unrolls):
        steps = batch.obs[:, :-1]  # obs[:, -1] opens the next unroll
        if ACTIVE_EXTRA in batch.extras:
            steps = steps[batch.extras[ACTIVE_EXTRA]]
        return steps, ("obs", "final_obs")
    names = ", ".join(f.name for f in fields(batch))
    raise TypeError(f"cannot normalize the observations of a {type(batch).__name__} ({names})")


class NormalizingLearner(Generic[B]):
    """A learner whose updates see normalized observations or rewards (or both), and whose
    weights, warm starts and checkpoints carry the observations' statistics (checkpoints
    the returns' too)."""

    def __init__(self, learner: Learner[B], spec: EnvSpec, reuse: float) -> None:
        self.learner = learner
        shape = spec.observation_space.shape or ()
        self.observation_clip = spec.observation_clip
        self.float_parts = None if spec.layout is None else spec.layout.float_parts
        """A flattened observation's float ranges, the only ones normalized."""
        self.moments = None if spec.observation_clip is None else RunningMoments(shape)
        self.reward_clip = spec.reward_clip
        self.return_moments = None if spec.reward_clip is None else RunningMoments(())
        """Of the workers' running discounted returns, whose spread scales the rewards."""
        self.reuse = reuse
        """How often an item is sampled on average (replay's samples per insert; 1 for
        unrolls, which the queue gives a learner once, however many passes it makes)."""

    @property
    def updates(self) -> int:
        return self.learner.updates

    @property
    def device(self) -> torch.device:
        return self.learner.device

    @property
    def nonfinite(self) -> NonFiniteSteps:
        return self.learner.nonfinite

    def update(self, batch: B) -> UpdateResult:
        changes: dict[str, Any] = {}  # new values of `batch`'s own fields
        if self.moments is not None and self.observation_clip is not None:
            raw, names = _observation_fields(batch)
            self._add(self.moments, raw.reshape(-1, *self.moments.mean.shape))
            for name in names:
                changes[name] = self.moments.normalize(
                    getattr(batch, name), self.observation_clip, self.float_parts
                )
        if self.return_moments is not None and self.reward_clip is not None:
            # the on-policy family alone allows env.normalize.rewards (its config check)
            assert isinstance(batch, Unrolls), "reward normalization learns from unrolls"
            returns = batch.extras[RETURN_EXTRA]
            if ACTIVE_EXTRA in batch.extras:  # an idle agent's steps say nothing of returns
                returns = returns[batch.extras[ACTIVE_EXTRA]]
            self._add(self.return_moments, returns.reshape(-1))
            changes["rewards"] = self.return_moments.scale(batch.rewards, self.reward_clip)
        result = self.learner.update(replace(batch, **changes))
        if self.return_moments is not None:
            spread = float(np.sqrt(self.return_moments.var + VARIANCE_EPSILON))
            result.metrics["learner/return_std"] = spread
        return result

    def _add(self, moments: RunningMoments, values: np.ndarray) -> None:
        values = values.astype(np.float64)
        values = values[np.isfinite(values).reshape(len(values), -1).all(axis=1)]
        total, total_sq, size = summed_over_learners(
            values.sum(0), np.square(values).sum(0), len(values), self.learner.device
        )
        moments.update(total, total_sq, size, weight=1.0 / self.reuse)

    def get_weights(self) -> ModelInfo:
        info = self.learner.get_weights()
        if self.moments is None:
            return info
        return replace(info, weights={**info.weights, **self.moments.as_weights()})

    def set_policy_weights(self, info: ModelInfo) -> None:
        network, moments = split_moments(info.weights)
        self.learner.set_policy_weights(replace(info, weights=network))
        if moments and self.moments is not None:
            self.moments.load(moments)

    def state_dict(self) -> dict[str, Any]:
        import torch

        state = dict(self.learner.state_dict())
        for key, moments in self._statistics().items():
            state[key] = {k: torch.from_numpy(v) for k, v in moments.as_weights().items()}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the learner and the statistics (a run cannot resume across a change of
        `env.normalize`: `normalization_mismatch`, `reward_normalization_mismatch`)."""
        self.learner.load_state_dict(state)
        for key, moments in self._statistics().items():
            moments.load({k: np.asarray(v) for k, v in state[key].items()})

    def _statistics(self) -> dict[str, RunningMoments]:
        """The statistics a checkpoint holds, by their key in the learner's state."""
        held = {"observation_moments": self.moments, RETURN_MOMENTS_KEY: self.return_moments}
        return {key: moments for key, moments in held.items() if moments is not None}


def reward_normalization_mismatch(learner_state: dict[str, Any], normalized: bool) -> str | None:
    """What is wrong with resuming a learner's state with (or without) reward normalisation,
    if anything: its values were learned at the other scale."""
    return _setting_mismatch("rewards", RETURN_MOMENTS_KEY in learner_state, normalized)


def summed_over_learners(
    total: np.ndarray, total_sq: np.ndarray, size: float, device: Any
) -> tuple[np.ndarray, np.ndarray, float]:
    """The batch moments summed over the learners' process group, when there is one (on
    the learners' device: NCCL reduces GPU tensors only)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return total, total_sq, size
    flat = torch.from_numpy(np.concatenate([total.ravel(), total_sq.ravel(), [size]]))
    flat = flat.to(device)
    dist.all_reduce(flat)
    summed = flat.cpu().numpy()
    size = total.size
    return (
        summed[:size].reshape(total.shape),
        summed[size : 2 * size].reshape(total.shape),
        float(summed[-1]),
    )
