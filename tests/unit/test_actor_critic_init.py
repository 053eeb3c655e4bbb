"""The actor-critic network's reference-implementation options: the MLP torso's tanh
(`algorithm.mlp_activation`) and the orthogonal init (`algorithm.orthogonal_init`), each
checked against a straightforward computation: the forward pass written out by hand, and
each layer's singular values (an orthogonal matrix scaled by a gain has every singular
value equal to that gain)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from rayrl.algorithms.actor_critic import make_actor_critic
from rayrl.config import Config, config_to_dict
from rayrl.envs import env_spec
from rayrl.errors import ConfigError
from rayrl.presets import load_config, saved_config


def network_from(config: Config) -> nn.Module:
    torch.manual_seed(0)
    return make_actor_critic(config.algorithm, env_spec(config.env))


def network_of(preset: str, *overrides: str) -> nn.Module:
    return network_from(load_config(preset, overrides))


def singular_values(weight: torch.Tensor) -> torch.Tensor:
    """Of a linear layer's (out, in) weight, or a convolution's flattened to (out, rest)."""
    return torch.linalg.svdvals(weight.detach().flatten(1))


def assert_orthogonal(layer: nn.Module, gain: float) -> None:
    values = singular_values(layer.weight)
    torch.testing.assert_close(values, torch.full_like(values, gain), rtol=1e-4, atol=1e-6)
    assert torch.count_nonzero(layer.bias) == 0


@pytest.mark.parametrize(
    ("preset", "torso", "layer_kind", "torso_layers"),
    [("cartpole_ppo", "mlp", nn.Linear, 2), ("minatar_ppo", "minatar_cnn", nn.Conv2d, 1)],
)
def test_orthogonal_init_gives_each_layer_its_reference_gain(
    preset, torso, layer_kind, torso_layers
):
    """Torsos (the policy's and the critic's, linear and convolution layers) sqrt(2), the
    policy head 0.01, the value head 1, every bias zero."""
    network = network_of(
        preset,
        f"algorithm.network={torso}",
        "algorithm.hidden_sizes=[64, 64]",
        "algorithm.orthogonal_init=true",
        "algorithm.separate_critic=true",
    )
    for torso_module in (network.torso, network.critic_torso):
        layers = [m for m in torso_module.modules() if isinstance(m, nn.Linear | nn.Conv2d)]
        assert sum(isinstance(m, layer_kind) for m in layers) == torso_layers
        for layer in layers:
            assert_orthogonal(layer, math.sqrt(2.0))
    assert_orthogonal(network.policy, 0.01)
    assert_orthogonal(network.value, 1.0)


def test_orthogonal_init_leaves_the_lstm_cores_as_torch_made_them():
    """As sb3-contrib's RecurrentPPO: only the torsos and heads are re-initialised. With the
    same seed, the policy's and the critic's cores are those a network without the option
    has."""
    overrides = ("algorithm.lstm_size=16", "algorithm.separate_critic=true")
    plain = network_of("cartpole_ppo", *overrides, "algorithm.orthogonal_init=false")
    initialised = network_of("cartpole_ppo", *overrides, "algorithm.orthogonal_init=true")
    for core in ("core", "critic_core"):
        for name, weights in getattr(plain, core).state_dict().items():
            torch.testing.assert_close(getattr(initialised, core).state_dict()[name], weights)
    assert not torch.allclose(initialised.policy.weight, plain.policy.weight)


def test_a_config_saved_before_the_options_builds_the_network_it_built_then():
    """A run's saved config without the two keys (rayrl before them) resumes with a ReLU
    torso and torch's default init: the network its checkpoints hold."""
    saved = config_to_dict(load_config("cartpole_ppo"))
    del saved["algorithm"]["mlp_activation"], saved["algorithm"]["orthogonal_init"]
    network = network_from(saved_config(saved))
    assert any(isinstance(m, nn.ReLU) for m in network.torso.modules())
    assert not any(isinstance(m, nn.Tanh) for m in network.modules())
    assert singular_values(network.policy.weight).max() > 0.1  # not scaled down to 0.01


def test_a_tanh_torso_is_the_hand_written_forward_pass():
    network = network_of(
        "cartpole_ppo", "algorithm.hidden_sizes=[64, 64]", "algorithm.mlp_activation=tanh"
    )
    first, second = [m for m in network.torso.modules() if isinstance(m, nn.Linear)]
    obs = torch.randn(5, 4)
    expected = torch.tanh(
        second.weight @ torch.tanh(first.weight @ obs.T + first.bias[:, None])
        + second.bias[:, None]
    ).T
    torch.testing.assert_close(network.torso(obs), expected)
    assert not any(isinstance(m, nn.ReLU) for m in network.modules())


@pytest.mark.parametrize(
    ("preset", "override", "message"),
    [
        (
            "cartpole_ppo",
            "algorithm.mlp_activation=sigmoid",
            r"algorithm.mlp_activation='sigmoid' is not valid; expected one of 'relu', 'tanh'",
        ),
        (
            "cartpole_ppo",
            "algorithm.orthogonal_init=maybe",
            r"algorithm.orthogonal_init='maybe' is not valid; expected true or false",
        ),
        (
            "cartpole_dqn",
            "algorithm.mlp_activation=tanh",
            r"unknown key 'algorithm.mlp_activation'",
        ),
    ],
)
def test_bad_settings_are_refused_with_the_key_and_what_is_valid(preset, override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(preset, [override])
