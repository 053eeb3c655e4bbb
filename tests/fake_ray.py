"""Fake actor handles and object references, for unit tests of the Ray runtime's supervisors.

A `FakeActor` records every `handle.method.remote(...)` call and returns `FakeRef`s that
the test resolves (`ref.resolve(value)`) or fails (`ref.fail(error)`); `FakeRay` gives the
dispatcher `wait` and `get` over them. `FakeFactory` makes named fake actors the way
`rayrl.ray.factory.ActorFactory` makes real ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from ray.exceptions import RayActorError, RayTaskError

from rayrl.envs.spec import EnvSpec
from rayrl.ray.identity import ActorIdentity
from rayrl.ray.watchdog import Watchdog

_ids = itertools.count()


class FakeRef:
    def __init__(self, label: str) -> None:
        self.label = label
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def resolve(self, value: Any = None) -> FakeRef:
        self.done, self.value = True, value
        return self

    def fail(self, error: BaseException) -> FakeRef:
        self.done, self.error = True, error
        return self

    def __repr__(self) -> str:
        return f"FakeRef({self.label})"


@dataclass
class Call:
    method: str
    args: tuple
    options: dict
    refs: tuple[FakeRef, ...]

    @property
    def ref(self) -> FakeRef:
        return self.refs[0]


OWN_IDENTITY = "(the actor's own identity)"
"""A behaviour for `identify`: the call answers at once with the actor's identity."""

FAKE_MACHINE = "fake-machine"
"""The address of the machine every fake actor runs on, the driver's (`fake_watchdog`)."""


def fake_watchdog(clock: Callable[[], float], starved: bool = False) -> Watchdog:
    """A watchdog on `clock` for fake actors on the driver's machine, which is never busy
    and stops no process. `starved`: every watched process's threads are read as waiting on
    a run queue two thirds of the time, so that a third of its seconds count (a load of 6
    on 2 cores); else none can be read, and its seconds count whole."""

    def thread_waits(pid: int) -> dict[int, float] | None:
        return {1: clock() * 2 / 3} if starved else None

    return Watchdog(
        clock,
        here=FAKE_MACHINE,
        contention=lambda: 1.0,
        stopped=lambda pid: False,
        thread_waits=thread_waits,
    )


class _Method:
    def __init__(self, actor: FakeActor, name: str, options: dict | None = None) -> None:
        self.actor, self.name, self._options = actor, name, options or {}

    def options(self, **options: Any) -> _Method:
        return _Method(self.actor, self.name, options)

    def remote(self, *args: Any) -> Any:
        count = self._options.get("num_returns", 1)
        refs = tuple(FakeRef(f"{self.actor.name}.{self.name}#{i}") for i in range(count))
        self.actor.calls.append(Call(self.name, args, self._options, refs))
        behaviour = self.actor.behaviour.get(self.name)
        if behaviour is OWN_IDENTITY:
            refs[0].resolve(self.actor.identity)
        elif behaviour is not None:  # answer at once, as Ray would once the call ran
            # Ray hands a method the values of the references it is called with
            values = [a.value if isinstance(a, FakeRef) else a for a in args]
            result = behaviour(*values)
            for ref, value in zip(refs, result if count > 1 else (result,), strict=True):
                ref.resolve(value)
        return refs if count > 1 else refs[0]


class FakeActor:
    def __init__(self, name: str, behaviour: dict[str, Any] | None = None) -> None:
        """`behaviour` maps method names to functions computing their results from the
        call's arguments; calls to other methods wait for the test to resolve them."""
        self.name = name
        self.id = f"{name}-{next(_ids)}"
        """What Ray's errors name the actor by (`RayActorError.actor_id`)."""
        self.identity = ActorIdentity(self.id, FAKE_MACHINE, next(_ids))
        """What its `identify` answers (the pid is no process's)."""
        self.calls: list[Call] = []
        self.killed = False
        self.behaviour = behaviour or {}

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)

    def calls_to(self, method: str) -> list[Call]:
        return [call for call in self.calls if call.method == method]

    def died(self) -> RayActorError:
        """The error a call to this actor raises once it is dead."""
        return RayActorError(actor_id=self.id)

    def failed_to_start(self, error: str) -> RayActorError:
        """The error a call to this actor raises when its constructor raised `error`."""
        message = f"The actor died because of an error raised in its creation task\n{error}"
        return RayActorError(actor_id=self.id, error_msg=message, actor_init_failed=True)


def task_error(message: str) -> RayTaskError:
    """The error of a call whose method raised (the actor lives on)."""
    return RayTaskError("method", f"Traceback: {message}", ValueError(message))


class FakeRay:
    """`wait` and `get` for the dispatcher."""

    @staticmethod
    def wait(refs: list[FakeRef], num_returns: int, timeout: float) -> tuple[list, list]:
        ready = [ref for ref in refs if ref.done][:num_returns]
        return ready, [ref for ref in refs if ref not in ready]

    @staticmethod
    def get(ref: FakeRef) -> Any:
        if ref.error is not None:
            raise ref.error
        return ref.value


@dataclass
class FakeFactory:
    """Makes fake actors; `behaviours` gives each role's methods (a role is the actor's
    name up to its index: "worker", "replay", "learner", "evaluator")."""

    num_learners: int = 1
    learner_gpus: float = 0.0
    spec: EnvSpec = field(
        default_factory=lambda: EnvSpec(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), None)
    )
    """A single-agent env's (the runs the fakes stand in for are CartPole's)."""
    behaviours: dict[str, dict[str, Any]] = field(default_factory=dict)
    made: list[FakeActor] = field(default_factory=list)
    experience_restores: list[Any] = field(default_factory=list)

    def _make(self, name: str, answers_id: bool = False) -> FakeActor:
        """`answers_id`: its `identify` answers at once (unless its role's behaviour says
        otherwise); else the test answers it, as the moment the actor has started."""
        role = name.split("-")[0].split(".")[0]
        behaviour = {"identify": OWN_IDENTITY} if answers_id else {}
        actor = FakeActor(name, {**behaviour, **self.behaviours.get(role, {})})
        self.made.append(actor)
        return actor

    def worker(self, index: int, incarnation: int) -> FakeActor:
        return self._make(f"worker-{index}.{incarnation}")

    def experience(self, restore: Any, incarnation: int = 0) -> FakeActor:
        self.experience_restores.append(restore)
        return self._make(f"replay.{incarnation}")

    def learners(self, store: Any, start: Any, incarnation: int = 0) -> list[FakeActor]:
        learners = [
            self._make(f"learner-{rank}.{incarnation}", answers_id=True)
            for rank in range(self.num_learners)
        ]
        for learner in learners:
            learner.start = start  # type: ignore[attr-defined]
            learner.store = store  # type: ignore[attr-defined]
        return learners

    def evaluator(self, incarnation: int = 0) -> FakeActor:
        return self._make(f"evaluator.{incarnation}")

    @staticmethod
    def kill(handle: FakeActor) -> None:
        handle.killed = True
