"""A plain single-process DQN on MinAtar: the loop a user would write instead of rayrl,
with `minatar_dqn`'s settings, for `bench/vs_plain_loop.py`.

Sampling and learning take turns in one process, as in the MinAtar paper's
`examples/dqn.py`: step the vector env once, store the transitions, then make one update
of batch 32 per env step taken. The network, optimizer, replay size, warm-up, target
copies, epsilon schedule and loss are `rayrl/configs/minatar_dqn.yaml`'s:
- the paper's network (one 16-filter 3x3 convolution, 128 units), one-step targets, no
  double Q, no dueling; Huber loss, a mean over the batch;
- the grids copied into (channels, height, width) order, as the paper's examples batch
  them (a permuted view alone runs the convolution slower, as `rayrl`'s torso says);
- centered RMSprop, lr 2.5e-4, alpha 0.95, eps 0.01; a target copy every 1,000 updates;
- 100k transitions, 5k before the first update, uniform sampling;
- epsilon from 1 to 0.1 over 100k env steps, sticky actions 0.1, episodes cut at 10k steps.

It is written without rayrl (gymnasium, minatar, numpy and torch only), so that it
measures what the single process costs, not rayrl's code run in one process (that is
`rayrl train --runtime local`). Prints one line of figures that the harness reads.

    python bench/plain_dqn.py --env-steps 60000
"""

from __future__ import annotations

import argparse
import time

started = time.monotonic()

import numpy as np  # noqa: E402  (the imports count in the whole command's time)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from plain_loop import evaluate, make_envs, parser, report  # noqa: E402
from torch import nn  # noqa: E402


class QNetwork(nn.Module):
    def __init__(self, channels: int, actions: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 16, kernel_size=3)
        self.fc = nn.Linear(16 * 8 * 8, 128)
        self.q = nn.Linear(128, actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv(obs.float().permute(0, 3, 1, 2).contiguous()))
        return self.q(F.relu(self.fc(x.flatten(1))))


class Replay:
    """Uniform replay of (obs, action, reward, next obs, terminated) in flat arrays."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], seed: int) -> None:
        self.obs = np.zeros((capacity, *obs_shape), np.uint8)
        self.next_obs = np.zeros((capacity, *obs_shape), np.uint8)
        self.actions = np.zeros(capacity, np.int64)
        self.rewards = np.zeros(capacity, np.float32)
        self.terminated = np.zeros(capacity, np.float32)
        self.capacity, self.size, self.cursor = capacity, 0, 0
        self.rng = np.random.default_rng(seed)

    def add(self, obs, actions, rewards, next_obs, terminated) -> None:
        rows = (self.cursor + np.arange(len(actions))) % self.capacity
        self.obs[rows], self.next_obs[rows] = obs, next_obs
        self.actions[rows], self.rewards[rows], self.terminated[rows] = (
            actions,
            rewards,
            terminated,
        )
        self.cursor = (self.cursor + len(actions)) % self.capacity
        self.size = min(self.size + len(actions), self.capacity)

    def sample(self, batch: int) -> tuple[torch.Tensor, ...]:
        rows = self.rng.integers(0, self.size, size=batch)
        return tuple(
            torch.from_numpy(array[rows])
            for array in (self.obs, self.actions, self.rewards, self.next_obs, self.terminated)
        )


def evaluate_greedy(network: QNetwork, game: str, episodes: int, seed: int) -> float:
    """Mean return at epsilon 0.05 (rayrl's `eval_epsilon`)."""
    rng = np.random.default_rng(seed + 1)
    actions = network.q.out_features

    def act(obs: np.ndarray) -> int:
        if rng.random() < 0.05:
            return int(rng.integers(actions))
        with torch.inference_mode():
            return int(network(torch.from_numpy(obs[None]).to(torch.uint8)).argmax())

    return evaluate(act, game, episodes, seed)


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    envs = make_envs(args.game, args.envs)
    obs_shape = envs.single_observation_space.shape
    actions = int(envs.single_action_space.n)
    network, target = QNetwork(obs_shape[-1], actions), QNetwork(obs_shape[-1], actions)
    target.load_state_dict(network.state_dict())
    optimizer = torch.optim.RMSprop(
        network.parameters(), lr=2.5e-4, alpha=0.95, eps=0.01, centered=True
    )
    replay = Replay(100_000, obs_shape, args.seed)
    rng = np.random.default_rng(args.seed)
    obs, _ = envs.reset(seed=args.seed)
    obs = obs.astype(np.uint8)
    env_steps, updates, returns = 0, 0, []
    update_s = 0.0
    episode_return = np.zeros(args.envs)
    first_step = time.monotonic()
    while env_steps < args.env_steps:
        epsilon = max(0.1, 1.0 - 0.9 * env_steps / 100_000)
        with torch.inference_mode():
            greedy = network(torch.from_numpy(obs)).argmax(1).numpy()
        explore = rng.random(args.envs) < epsilon
        chosen = np.where(explore, rng.integers(actions, size=args.envs), greedy)
        next_obs, rewards, terminated, truncated, info = envs.step(chosen)
        next_obs = next_obs.astype(np.uint8)
        ended = terminated | truncated
        # with same-step autoreset, next_obs of an ended env is the new episode's first
        # observation; the transition's own next observation is in info["final_obs"]
        stored_next = next_obs.copy()
        for i in np.flatnonzero(ended):
            stored_next[i] = info["final_obs"][i]
        replay.add(obs, chosen, rewards, stored_next, terminated)
        episode_return += rewards
        returns.extend(episode_return[ended].tolist())
        episode_return[ended] = 0.0
        obs = next_obs
        env_steps += args.envs
        if replay.size < 5_000:
            continue
        update_start = time.monotonic()
        for _ in range(args.envs):  # one update of 32 per env step
            b_obs, b_actions, b_rewards, b_next, b_terminated = replay.sample(32)
            with torch.no_grad():
                bootstrap = target(b_next).max(1).values
            targets = b_rewards + 0.99 * (1.0 - b_terminated) * bootstrap
            q = network(b_obs).gather(1, b_actions[:, None]).squeeze(1)
            loss = F.huber_loss(q, targets, delta=1.0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            updates += 1
            if updates % 1000 == 0:
                target.load_state_dict(network.state_dict())
        update_s += time.monotonic() - update_start
    trained = time.monotonic()
    report(
        "plain_dqn",
        started,
        first_step,
        trained,
        returns,
        evaluate_greedy(network, args.game, args.eval_episodes, args.seed),
        env_steps=env_steps,
        updates=updates,
        update_ms=round(1000 * update_s / max(updates, 1), 3),
        update_share=round(update_s / (trained - first_step), 3),
    )


def main() -> None:
    envs_help = "envs stepped together (minatar_dqn: 2 workers x 4)"
    train(parser(__doc__.splitlines()[0], 60_000, 8, envs_help).parse_args())


if __name__ == "__main__":
    main()
