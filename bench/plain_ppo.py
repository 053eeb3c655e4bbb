"""A plain single-process PPO on MinAtar: the loop a user would write instead of rayrl
(CleanRL's `ppo.py` shape), with `minatar_ppo`'s settings, for `bench/vs_plain_loop.py`.

Sampling and learning take turns in one process: 64 envs step 128 times, then 4 epochs
of 8 minibatches learn from those 8,192 steps. The settings are
`rayrl/configs/minatar_ppo.yaml`'s:
- the MinAtar paper's network body (one 16-filter 3x3 convolution, 128 units) twice: one
  for the policy, one for the value (`separate_critic: true`);
- the grids copied into (channels, height, width) order, as in `plain_dqn.py`;
- rewards divided by the standard deviation of the running discounted returns, clipped to
  [-10, 10] (`env.normalize.rewards: true`), with gymnasium's vector wrappers, which scale
  each step's rewards as they come (rayrl's learner scales a batch when it learns from
  it, with the statistics of that moment);
- GAE (gamma 0.999, lambda 0.95; a truncated episode bootstraps from its final
  observation's value), advantages normalised per minibatch, clip 0.2, no value clip,
  value 0.5 x 0.5 (V - R)^2, entropy 0.01, a mean over each minibatch;
- Adam, lr 2e-3 constant, eps 1e-5, gradient norm 0.5;
- sticky actions 0.1, episodes cut at 10k steps.

Written without rayrl (gymnasium, minatar, numpy and torch only). Prints one line of
figures that the harness reads. With `--target`, it also evaluates every `--eval-every` env
steps (at the end of the iteration that crosses the mark, as the other contenders of
`bench/race.py` do) and stops at the first evaluation at or above the target.

    python bench/plain_ppo.py --env-steps 500000
    python bench/plain_ppo.py --game MinAtar/SpaceInvaders-v1 --env-steps 2000000 \
        --target 70 --eval-every 50000 --eval-episodes 10
"""

from __future__ import annotations

import argparse
import time

started = time.monotonic()

import gymnasium as gym  # noqa: E402  (the imports count in the whole command's time)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from plain_loop import evaluate, make_envs, parser, report  # noqa: E402
from torch import nn  # noqa: E402

NUM_STEPS, EPOCHS, MINIBATCHES = 128, 4, 8
GAMMA, LAMBDA, CLIP, VALUE_COEF, ENTROPY_COEF, MAX_GRAD_NORM = 0.999, 0.95, 0.2, 0.5, 0.01, 0.5
REWARD_CLIP = 10.0


class Body(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 16, kernel_size=3)
        self.fc = nn.Linear(16 * 8 * 8, 128)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv(obs.float().permute(0, 3, 1, 2).contiguous()))
        return F.relu(self.fc(x.flatten(1)))


class ActorCritic(nn.Module):
    def __init__(self, channels: int, actions: int) -> None:
        super().__init__()
        self.actor, self.critic = Body(channels), Body(channels)
        self.policy = nn.Linear(128, actions)
        self.value = nn.Linear(128, 1)

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy(self.actor(obs))

    def values(self, obs: torch.Tensor) -> torch.Tensor:
        return self.value(self.critic(obs)).squeeze(-1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.logits(obs), self.values(obs)


def evaluate_sampling(network: ActorCritic, game: str, episodes: int, seed: int) -> float:
    """Mean return of actions sampled from the policy (rayrl's `eval_policy: sample` for
    this preset)."""
    generator = torch.Generator().manual_seed(seed + 1)

    def act(obs: np.ndarray) -> int:
        with torch.inference_mode():
            logits = network.logits(torch.from_numpy(obs[None]).to(torch.uint8))
            return int(torch.multinomial(logits.softmax(-1), 1, generator=generator))

    return evaluate(act, game, episodes, seed)


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    envs = gym.wrappers.vector.RecordEpisodeStatistics(make_envs(args.game, args.envs))
    envs = gym.wrappers.vector.NormalizeReward(envs, gamma=GAMMA)
    envs = gym.wrappers.vector.ClipReward(envs, -REWARD_CLIP, REWARD_CLIP)
    obs_shape = envs.single_observation_space.shape
    network = ActorCritic(obs_shape[-1], int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(network.parameters(), lr=2e-3, eps=1e-5)
    n = args.envs
    obs_buf = torch.zeros((NUM_STEPS, n, *obs_shape), dtype=torch.uint8)
    actions = torch.zeros((NUM_STEPS, n), dtype=torch.int64)
    logps, values = torch.zeros((NUM_STEPS, n)), torch.zeros((NUM_STEPS, n))
    rewards, terminated_buf = torch.zeros((NUM_STEPS, n)), torch.zeros((NUM_STEPS, n))
    ended_buf = torch.zeros((NUM_STEPS, n))
    final_values = torch.zeros((NUM_STEPS, n))
    """V(final observation) where an episode was truncated, else 0."""
    obs, _ = envs.reset(seed=args.seed)
    obs = torch.from_numpy(obs.astype(np.uint8))
    env_steps, iterations, returns = 0, 0, []
    evaluations: list[list[float]] = []
    next_eval = args.eval_every
    first_step = time.monotonic()
    while env_steps < args.env_steps:
        final_values.zero_()
        for t in range(NUM_STEPS):
            with torch.inference_mode():
                logits, value = network(obs)
                distribution = torch.distributions.Categorical(logits=logits)
                action = distribution.sample()
            obs_buf[t], actions[t], values[t] = obs, action, value
            logps[t] = distribution.log_prob(action)
            next_obs, reward, terminated, truncated, info = envs.step(action.numpy())
            rewards[t] = torch.from_numpy(reward.astype(np.float32))
            terminated_buf[t] = torch.from_numpy(terminated.astype(np.float32))
            ended = terminated | truncated
            ended_buf[t] = torch.from_numpy(ended.astype(np.float32))
            cut = np.flatnonzero(truncated & ~terminated)
            if len(cut):
                final = np.stack([info["final_obs"][i] for i in cut]).astype(np.uint8)
                with torch.inference_mode():
                    final_values[t, cut] = network.values(torch.from_numpy(final))
            if "episode" in info:  # the raw returns of the episodes that ended
                returns.extend(info["episode"]["r"][info["_episode"]].tolist())
            obs = torch.from_numpy(next_obs.astype(np.uint8))
        env_steps += NUM_STEPS * n

        with torch.no_grad():
            next_value = network.values(obs)
            advantages = torch.zeros((NUM_STEPS, n))
            gae = torch.zeros(n)
            for t in reversed(range(NUM_STEPS)):
                following = next_value if t == NUM_STEPS - 1 else values[t + 1]
                # an ended episode's next value: its final observation's if truncated, else 0
                bootstrap = torch.where(ended_buf[t] > 0, final_values[t], following)
                delta = rewards[t] + GAMMA * bootstrap - values[t]
                gae = delta + GAMMA * LAMBDA * (1.0 - ended_buf[t]) * gae
                advantages[t] = gae
            returns_buf = advantages + values

        b_obs, b_actions = obs_buf.flatten(0, 1), actions.flatten()
        b_logp, b_adv, b_ret = logps.flatten(), advantages.flatten(), returns_buf.flatten()
        count = len(b_logp)
        for _ in range(EPOCHS):
            for mb in torch.randperm(count).chunk(MINIBATCHES):
                logits, value = network(b_obs[mb])
                distribution = torch.distributions.Categorical(logits=logits)
                log_ratio = distribution.log_prob(b_actions[mb]) - b_logp[mb]
                ratio = log_ratio.exp()
                adv = (b_adv[mb] - b_adv[mb].mean()) / (b_adv[mb].std() + 1e-8)
                pg_loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - CLIP, 1 + CLIP))
                value_loss = 0.5 * (value - b_ret[mb]).pow(2).mean()
                loss = (
                    pg_loss.mean()
                    + VALUE_COEF * value_loss
                    - ENTROPY_COEF * distribution.entropy().mean()
                )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(network.parameters(), MAX_GRAD_NORM)
                optimizer.step()
        iterations += 1
        if args.target is not None and env_steps >= next_eval:
            next_eval += args.eval_every
            score = evaluate_sampling(network, args.game, args.eval_episodes, args.seed)
            evaluations.append([env_steps, score])
            print(f"evaluation: {env_steps} {score}", flush=True)  # read by bench/race.py
            if score >= args.target:
                break
    trained = time.monotonic()
    reached = args.target is not None and bool(evaluations) and evaluations[-1][1] >= args.target
    report(
        "plain_ppo",
        started,
        first_step,
        trained,
        returns,
        # no second evaluation after the one that reached the target
        evaluations[-1][1]
        if reached
        else evaluate_sampling(network, args.game, args.eval_episodes, args.seed),
        evaluations,
        env_steps=env_steps,
        updates=iterations,
    )


def main() -> None:
    envs_help = "envs stepped together (minatar_ppo: 2 workers x 32)"
    arguments = parser(__doc__.splitlines()[0], 500_000, 64, envs_help)
    arguments.add_argument("--target", type=float, help="stop at an evaluation this high")
    arguments.add_argument("--eval-every", type=int, default=50_000, help="with --target")
    train(arguments.parse_args())


if __name__ == "__main__":
    main()
