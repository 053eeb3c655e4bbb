"""Step processing: env steps -> what the learner's store keeps.

`UnrollProcessor` cuts fixed-length unrolls with behaviour log-probabilities (IMPALA).

`NStepProcessor` collects the `StepBatch`es of a chunk and computes all n-step transitions
at `flush` with a handful of vectorized numpy operations (a per-env Python loop per step
would cost more than stepping CartPole). Steps whose n-step window is still open carry over
to the next chunk.

`FrameTracker` gives every distinct observation frame an id. A stacked Atari observation
shares all but its newest frame with the previous one, so a transition adds about one frame;
chunks carry the unique frames plus index arrays (`TransitionChunk`).
"""

from __future__ import annotations

import numpy as np

from rayrl.core import StepBatch, TransitionChunk, Unrolls


def n_step_targets(
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    n_step: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """N-step returns for every (t, env) of a time-major block of steps.

    Args:
        rewards, terminated, truncated: arrays of shape (T, num_envs).

    Returns:
        `returns` (T, E): sum of gamma**j * r[t+j] up to n steps or the episode's end;
        `discounts` (T, E): gamma**k to the bootstrap observation, 0 after a termination;
        `bootstrap_t` (T, E): the step whose `next_obs` is the bootstrap observation;
        `complete` (T, E): False where the window runs past the block (no episode end seen
        yet), i.e. the transition must wait for more steps.
    """
    steps, num_envs = rewards.shape
    returns = np.zeros((steps, num_envs), dtype=np.float64)
    discounts = np.ones((steps, num_envs), dtype=np.float64)
    bootstrap_t = np.zeros((steps, num_envs), dtype=np.int64)
    open_ = np.ones((steps, num_envs), dtype=bool)  # window has not ended yet
    complete = np.zeros((steps, num_envs), dtype=bool)
    base = np.arange(steps)[:, None]
    for j in range(n_step):
        t = base + j
        inside = t < steps
        tc = np.minimum(t, steps - 1)
        live = open_ & inside
        r = np.take_along_axis(rewards, np.broadcast_to(tc, (steps, num_envs)), axis=0)
        term = np.take_along_axis(terminated, np.broadcast_to(tc, (steps, num_envs)), axis=0)
        trunc = np.take_along_axis(truncated, np.broadcast_to(tc, (steps, num_envs)), axis=0)
        returns += np.where(live, discounts * r, 0.0)
        discounts = np.where(live, discounts * gamma, discounts)
        bootstrap_t = np.where(live, np.broadcast_to(tc, (steps, num_envs)), bootstrap_t)
        ended = live & (term | trunc)
        discounts = np.where(live & term, 0.0, discounts)
        complete |= ended
        open_ &= ~ended
        if j == n_step - 1:
            complete |= live  # a full window without an episode end
    return returns, discounts, bootstrap_t, complete


class FrameTracker:
    """Ids for observation frames, so that each frame is stored once.

    For stacked observations (frame_stack S) the frames are the S slices of the stack; for
    unstacked ones the whole observation is one frame. Ids grow monotonically; `compact`
    forgets frames older than the oldest id still referenced.
    """

    def __init__(self, num_envs: int, frame_stack: int | None) -> None:
        self.num_envs = num_envs
        self.stacked = frame_stack is not None
        self.stack = frame_stack or 1
        self._frames: np.ndarray | None = None
        self._count = 0
        self._first_id = 0  # id of self._frames[0]
        self._current: np.ndarray | None = None  # (E, S) ids of the obs the next action sees
        self._reset_pending = np.zeros(num_envs, dtype=bool)

    def observe(self, step: StepBatch) -> tuple[np.ndarray, np.ndarray]:
        """Ids of `step.obs` and `step.next_obs`, each (num_envs, stack) int64."""
        if self._current is None:
            self._current = self._register_stacks(step.obs)
        elif self._reset_pending.any():
            envs = np.flatnonzero(self._reset_pending)
            self._current[envs] = self._register_stacks(step.obs[envs])
        obs_ids = self._current
        newest = step.next_obs[:, -1] if self.stacked else step.next_obs
        new_ids = self._register(newest)
        next_ids = np.concatenate([obs_ids[:, 1:], new_ids[:, None]], axis=1)
        self._current = next_ids.copy()
        self._reset_pending = np.asarray(step.env_reset, dtype=bool).copy()
        return obs_ids.copy(), next_ids

    def frames(self, ids: np.ndarray) -> np.ndarray:
        """The frames with these ids (which must not have been compacted away)."""
        assert self._frames is not None
        return self._frames[ids - self._first_id]

    def compact(self, oldest_needed: int) -> None:
        """Forget frames with ids below `oldest_needed`."""
        if self._frames is None:
            return
        if self._current is not None:
            oldest_needed = min(oldest_needed, int(self._current.min()))
        drop = oldest_needed - self._first_id
        if drop <= 0:
            return
        keep = self._count - drop
        self._frames[:keep] = self._frames[drop : self._count]
        self._count = keep
        self._first_id = oldest_needed

    @property
    def next_id(self) -> int:
        return self._first_id + self._count

    def _register(self, frames: np.ndarray) -> np.ndarray:
        n = len(frames)
        if self._frames is None:
            self._frames = np.empty((max(64, 4 * n), *frames.shape[1:]), dtype=frames.dtype)
        if self._count + n > len(self._frames):
            grown = np.empty((2 * (self._count + n), *frames.shape[1:]), dtype=frames.dtype)
            grown[: self._count] = self._frames[: self._count]
            self._frames = grown
        self._frames[self._count : self._count + n] = frames
        ids = np.arange(self.next_id, self.next_id + n, dtype=np.int64)
        self._count += n
        return ids

    def _register_stacks(self, obs: np.ndarray) -> np.ndarray:
        """Ids for whole observations (after a reset); equal neighbours in a stack, such as
        the zero padding of a fresh Atari stack, share one id."""
        if not self.stacked:
            return self._register(obs)[:, None]
        ids = np.empty((len(obs), self.stack), dtype=np.int64)
        for i, stack in enumerate(obs):
            for k in range(self.stack):
                if k > 0 and np.array_equal(stack[k], stack[k - 1]):
                    ids[i, k] = ids[i, k - 1]
                else:
                    ids[i, k] = self._register(stack[k][None])[0]
        return ids


class NStepProcessor:
    """Vector env steps -> `TransitionChunk`s of n-step transitions.

    Termination ends the bootstrap (discount 0); truncation bootstraps from the episode's
    final observation with gamma**k for the k steps taken. An episode end inside the n-step
    window shortens the window.
    """

    def __init__(self, num_envs: int, *, n_step: int, gamma: float, frame_stack: int | None):
        self.num_envs = num_envs
        self.n_step = n_step
        self.gamma = gamma
        self.tracker = FrameTracker(num_envs, frame_stack)
        self._steps: list[dict[str, np.ndarray]] = []
        self._carry: dict[str, np.ndarray] | None = None

    def process(self, step: StepBatch, policy_version: int) -> None:
        obs_ids, next_ids = self.tracker.observe(step)
        self._steps.append(
            {
                "obs_ids": obs_ids,
                "next_ids": next_ids,
                "actions": np.asarray(step.actions),
                "rewards": np.asarray(step.rewards, dtype=np.float64),
                "terminated": np.asarray(step.terminated, dtype=bool),
                "truncated": np.asarray(step.truncated, dtype=bool),
                "pending": np.ones(self.num_envs, dtype=bool),
                "version": np.full(self.num_envs, policy_version, dtype=np.int64),
            }
        )

    def flush(self) -> TransitionChunk:
        """All transitions completed so far, with their frames."""
        blocks = [] if self._carry is None else [self._carry]
        if self._steps:
            blocks.append({k: np.stack([s[k] for s in self._steps]) for k in self._steps[0]})
        if not blocks:
            raise RuntimeError("flush() before any process()")
        block = {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}
        self._steps = []

        returns, discounts, bootstrap_t, complete = n_step_targets(
            block["rewards"], block["terminated"], block["truncated"], self.gamma, self.n_step
        )
        emit = complete & block["pending"]
        t_idx, env_idx = np.nonzero(emit)
        obs_ids = block["obs_ids"][t_idx, env_idx]
        next_ids = block["next_ids"][bootstrap_t[t_idx, env_idx], env_idx]

        # Steps from the first still-open window onwards wait for the next chunk.
        open_rows = np.nonzero((~complete & block["pending"]).any(axis=1))[0]
        if len(open_rows):
            start = int(open_rows[0])
            self._carry = {k: v[start:].copy() for k, v in block.items()}
            self._carry["pending"] &= ~emit[start:]
            oldest_needed = int(self._carry["obs_ids"].min())
        else:
            self._carry = None
            oldest_needed = self.tracker.next_id

        unique_ids, inverse = np.unique(
            np.concatenate([obs_ids.ravel(), next_ids.ravel()]), return_inverse=True
        )
        frames = self.tracker.frames(unique_ids)
        local = inverse.astype(np.int32)
        stack = obs_ids.shape[1] if obs_ids.ndim == 2 else 1
        count = len(t_idx)
        chunk = TransitionChunk(
            frames=frames,
            obs_idx=local[: count * stack].reshape(count, stack),
            actions=block["actions"][t_idx, env_idx],
            rewards=returns[t_idx, env_idx].astype(np.float32),
            discounts=discounts[t_idx, env_idx].astype(np.float32),
            next_obs_idx=local[count * stack :].reshape(count, stack),
            policy_version=int(block["version"][t_idx, env_idx].min()) if count else 0,
        )
        self.tracker.compact(oldest_needed)
        return chunk


RETURN_EXTRA = "discounted_return"
"""The per-step extra holding the running discounted return (reward normalisation)."""


class UnrollProcessor:
    """Vector env steps -> one `Unrolls` of `steps_per_chunk` steps per env at each flush.

    Keeps every extra the policy reported for every step (it needs "logp", the behaviour
    log-probabilities) and the policy's state before each unroll's first step. The bootstrap
    observation of an unroll is the last step's true successor; truncated steps keep their
    final observation.

    With `return_discount` (reward normalisation) it also keeps each env's running
    discounted return at every step, `RETURN_EXTRA`: R_t = r_t + gamma R_{t-1}, from 0 at
    each episode's start, across unrolls; the learner scales rewards by its spread. It runs
    over whole games: a lost life that is terminal for learning does not restart it.
    """

    def __init__(self, num_envs: int, steps_per_chunk: int, return_discount: float | None = None):
        self.num_envs = num_envs
        self.steps_per_chunk = steps_per_chunk
        self.return_discount = return_discount
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._steps: list[StepBatch] = []
        self._versions: list[int] = []

    def process(self, step: StepBatch, policy_version: int) -> None:
        if "logp" not in step.extras:
            raise ValueError("UnrollProcessor needs the policy's behaviour log-probabilities")
        if self.return_discount is not None:
            self._returns = self._returns * self.return_discount + step.rewards
            step.extras = {**step.extras, RETURN_EXTRA: self._returns.astype(np.float32)}
            self._returns[step.env_reset] = 0.0
        self._steps.append(step)
        self._versions.append(policy_version)

    def flush(self) -> Unrolls:
        steps, self._steps = self._steps, []
        versions, self._versions = self._versions, []
        if len(steps) != self.steps_per_chunk:
            raise RuntimeError(f"an unroll needs {self.steps_per_chunk} steps, got {len(steps)}")

        def stack(values: list[np.ndarray]) -> np.ndarray:
            return np.stack(values, axis=1)  # (E, T, ...)

        truncated = stack([s.truncated for s in steps])
        envs, times = np.nonzero(truncated)
        extras = {key: stack([s.extras[key] for s in steps]) for key in steps[0].extras}
        extras["logp"] = extras["logp"].astype(np.float32)
        return Unrolls(
            obs=stack([s.obs for s in steps] + [steps[-1].next_obs]),
            actions=stack([s.actions for s in steps]),
            rewards=stack([s.rewards for s in steps]).astype(np.float32),
            terminated=stack([s.terminated for s in steps]),
            truncated=truncated,
            env_reset=stack([s.env_reset for s in steps]),
            final_obs=np.stack([steps[t].next_obs[e] for e, t in zip(envs, times, strict=True)])
            if len(envs)
            else np.zeros((0, *steps[0].obs.shape[1:]), dtype=steps[0].obs.dtype),
            final_index=np.stack([envs, times], axis=1).astype(np.int64),
            policy_versions=np.full(self.num_envs, min(versions), dtype=np.int64),
            extras=extras,
            initial_state={key: value.copy() for key, value in steps[0].state.items()},
        )
