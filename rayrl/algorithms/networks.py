"""Network torsos and heads shared by the algorithms.

A torso maps observations to features: an MLP for vector observations, the Nature-DQN CNN
(Mnih et al. 2015) for stacked 84x84 frames, which it scales from uint8 to [0, 1] itself so
that frames travel and are stored as bytes, and the MinAtar CNN (Young & Tian 2019) for
(10, 10, C) boolean grids.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rayrl.config import MLPActivation, NetworkKind
from rayrl.errors import ConfigError


class Torso(nn.Module):
    """Maps a batch of observations to a batch of `out_features` features."""

    out_features: int

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """`forward` through `nn.Module.__call__` (hooks included), typed: torch types a
        module's call as returning anything."""
        features: torch.Tensor = super().__call__(obs)
        return features


ACTIVATIONS: dict[MLPActivation, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}
"""The MLP torso's nonlinearities, by the name a config gives (`MLPActivation`)."""


class MLPTorso(Torso):
    def __init__(
        self, in_features: int, hidden_sizes: tuple[int, ...], activation: MLPActivation = "relu"
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        size = in_features
        for hidden in hidden_sizes:
            layers += [nn.Linear(size, hidden), ACTIVATIONS[activation]()]
            size = hidden
        self.layers = nn.Sequential(*layers)
        self.out_features = size

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features: torch.Tensor = self.layers(obs.float())
        return features


class NatureCNNTorso(Torso):
    def __init__(self, in_channels: int, height: int, width: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            conv_out = self.conv(torch.zeros(1, in_channels, height, width)).shape[1]
        self.fc = nn.Sequential(nn.Linear(conv_out, 512), nn.ReLU())
        self.out_features = 512

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features: torch.Tensor = self.fc(self.conv(obs.float() / 255.0))
        return features


class MinAtarTorso(Torso):
    """The MinAtar paper's network body: one 16-filter 3x3 convolution and a 128-unit layer,
    on (height, width, channels) grids as the games give them.

    The grids are copied into (channels, height, width) order before the convolution. A
    permuted view alone would run it channels-last, and flattening its output then copies
    it back into order, forward and backward, which makes the torso's forward and backward
    slower on a CPU, the more so the larger the batch (the study: `bench/reports/benchmarks.md`)."""

    def __init__(self, height: int, width: int, channels: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(channels, 16, kernel_size=3), nn.ReLU(), nn.Flatten())
        self.fc = nn.Sequential(nn.Linear(16 * (height - 2) * (width - 2), 128), nn.ReLU())
        self.out_features = 128

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features: torch.Tensor = self.fc(self.conv(obs.float().permute(0, 3, 1, 2).contiguous()))
        return features


def make_torso(
    kind: NetworkKind,
    observation_space: spaces.Space[np.ndarray],
    hidden_sizes: tuple[int, ...],
    mlp_activation: MLPActivation = "relu",
) -> Torso:
    """The torso for `observation_space`; "auto" picks the Nature CNN for (C, H, W) byte
    images, the MinAtar CNN for (H, W, C) boolean grids, and the MLP (with `mlp_activation`
    between its layers) otherwise."""
    shape = observation_space.shape
    if shape is None:
        raise ConfigError(f"observation space {observation_space} is not supported")
    if kind == "auto":
        kind = "mlp"
        if len(shape) == 3 and observation_space.dtype == np.uint8:
            kind = "nature_cnn"
        elif len(shape) == 3 and observation_space.dtype == np.bool_:
            kind = "minatar_cnn"
    if kind in ("nature_cnn", "minatar_cnn") and len(shape) != 3:
        layout = "(channels, height, width)" if kind == "nature_cnn" else "(10, 10, channels)"
        raise ConfigError(
            f"algorithm.network={kind!r} needs {layout} observations; this env's are {shape}. "
            "Use 'mlp' or 'auto'"
        )
    if kind == "nature_cnn":
        return NatureCNNTorso(*shape)
    if kind == "minatar_cnn":
        return MinAtarTorso(*shape)
    return MLPTorso(int(np.prod(shape)), hidden_sizes, mlp_activation)


class QNetwork(nn.Module):
    """Action values; the dueling head splits them into V(s) + A(s, a) - mean_a A(s, a)."""

    def __init__(self, torso: Torso, num_actions: int, dueling: bool) -> None:
        super().__init__()
        self.torso = torso
        features = torso.out_features
        self.dueling = dueling
        if dueling:
            self.value = nn.Linear(features, 1)
            self.advantage = nn.Linear(features, num_actions)
        else:
            self.q = nn.Linear(features, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        features = self.torso(obs)
        if not self.dueling:
            q: torch.Tensor = self.q(features)
            return q
        advantage: torch.Tensor = self.advantage(features)
        value: torch.Tensor = self.value(features)
        return value + advantage - advantage.mean(dim=1, keepdim=True)


def numpy_state_dict(module: nn.Module) -> dict[str, np.ndarray]:
    """A CPU numpy copy of `module`'s state dict (what crosses the object store)."""
    return {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_numpy_state_dict(module: nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Load a state dict of numpy arrays into `module` in place.

    Arrays from Ray's object store are read-only views of shared memory. `load_state_dict`
    only reads them (it copies into the module's own parameters), so they are wrapped
    without an extra copy, and torch's warning about non-writable arrays is silenced here.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        module.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in weights.items()})


def resolve_device(device: str) -> torch.device:
    """ "auto" is CUDA when torch sees a GPU, else CPU. Any other `learner.device` was parsed
    by torch when the config was built (`rayrl.config.torch_device_problem`); whether this
    process sees a GPU is only known here, where the learner runs."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"learner.device={device!r} but torch sees no CUDA device; use 'auto'")
    return resolved
