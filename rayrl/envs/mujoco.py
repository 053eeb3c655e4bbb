"""MuJoCo (gymnasium's `HalfCheetah-v5`, `Hopper-v5`, ... ids): continuous control through the
`mujoco` package (`pip install 'rayrl[mujoco]'`).

The envs are gymnasium's own, in a synchronous vector env as for plain ids; what the suite
adds is knowing its ids (those whose registered entry point is gymnasium's MuJoCo package),
naming the extra when `mujoco` is missing, before anything starts, and headless rendering
for videos: MuJoCo renders through OpenGL, which on a machine without a display needs
EGL, so the suite selects it (`MUJOCO_GL=egl`) unless the user chose a backend. MuJoCo's
own warnings go to this module's logger, each message once per process, instead of a
`MUJOCO_LOG.TXT` it would write into the working directory (gymnasium's HalfCheetah model
raises a deprecation warning each time it is built; those are logged at debug level).
Observation normalisation, which MuJoCo policies usually want, is `env.normalize`, a
setting of every suite with vector observations.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import gymnasium as gym

from rayrl.config import EnvConfig
from rayrl.envs.plain import PlainGymnasium
from rayrl.errors import ConfigError

ENTRY_POINT_PREFIX = "gymnasium.envs.mujoco"

logger = logging.getLogger(__name__)
_warned: set[str] = set()


def _log_warning(message: str) -> None:
    if message in _warned:
        return
    _warned.add(message)
    level = logging.DEBUG if "deprecated" in message else logging.WARNING
    logger.log(level, "MuJoCo: %s", message)


def require_mujoco() -> None:
    """Raise a `ConfigError` naming the extra if the `mujoco` package is missing; route
    MuJoCo's warnings to the log."""
    try:
        import mujoco
    except ImportError:
        raise ConfigError(
            "MuJoCo ids need the mujoco package: pip install 'rayrl[mujoco]'"
        ) from None
    mujoco.set_mju_user_warning(_log_warning)


class MuJoCo(PlainGymnasium):
    """Gymnasium's MuJoCo ids, with the `mujoco` package checked first and EGL rendering."""

    name = "mujoco"

    def owns(self, env_id: str) -> bool:
        entry = gym.registry.get(env_id)
        return entry is not None and str(entry.entry_point).startswith(ENTRY_POINT_PREFIX)

    def check(self, config: EnvConfig, key: str = "env.id") -> None:
        require_mujoco()
        super().check(config, key)

    def make_vector_env(
        self, config: EnvConfig, num_envs: int, num_threads: int
    ) -> gym.vector.VectorEnv:
        require_mujoco()
        return super().make_vector_env(config, num_envs, num_threads)

    def make_render_env(
        self, config: EnvConfig, wrap_raw: Callable[[gym.Env], gym.Env] = lambda env: env
    ) -> gym.Env:
        require_mujoco()
        os.environ.setdefault("MUJOCO_GL", "egl")
        return super().make_render_env(config, wrap_raw)


MUJOCO = MuJoCo()
