"""What every torch learner shares, so that an algorithm's learner holds only its networks,
its optimizer and its update.

`TorchLearner` seeds torch, resolves the device, wraps the trained network for gradient
all-reduce when the learner is one of several (`learner.num_learners`: torch's
DistributedDataParallel, gloo on CPU, NCCL on GPU), turns batches into tensors, builds the
configured optimizers, takes guarded, clipped optimizer steps, publishes the acting
network's weights and saves and restores its named components for checkpoints.

With `learner.compile_optimizer`, RMSprop's step is torch.compile's (`CompiledStep`): its
learning rate is then a tensor, an input of the compiled step, so that a schedule moving it
every update does not recompile it; whatever sets a rate goes through `set_group_value`,
which fills that tensor in place.

A learner may own several optimizers (SAC: an actor, twin critics and a temperature, each
at its own rate): each comes from `make_optimizer`, which remembers its configured rate,
and each `step` names the optimizer and the parameters it clips, so that every part gets
the non-finite guard, the clipping and, on restore, its configured settings back.
"""

from __future__ import annotations

import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from rayrl.algorithms.networks import load_numpy_state_dict, numpy_state_dict, resolve_device
from rayrl.compat import torch_internals
from rayrl.config import LearnerConfig
from rayrl.core import ModelInfo, NonFiniteSteps

logger = logging.getLogger(__name__)

CLIP_EPS = 1e-6
"""What torch's clipping adds to the gradient norm before dividing by it: it scales the
gradients by `max_norm / (norm + CLIP_EPS)`, clamped to 1."""


class Checkpointed(Protocol):
    """A part a checkpoint holds: a network, an optimizer, a schedule, a lone parameter."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> object: ...


class TorchLearner(ABC):
    """Base of the torch learners. A subclass builds its networks after `super().__init__`
    (so that they start from the run's seed), sets `acting_network` (what workers act
    with), builds its optimizers with `make_optimizer`, and lists its checkpointed parts in
    `components`."""

    acting_network: nn.Module

    def __init__(self, settings: LearnerConfig, seed: int) -> None:
        torch.manual_seed(seed)
        self.settings = settings
        self.device = resolve_device(settings.device)
        if self.device.type == "cpu" and settings.device == "auto":
            logger.info("learner: torch sees no CUDA device; training on CPU")
        self.updates = 0
        self.nonfinite = NonFiniteSteps()
        self._skipped_in_update = -1
        """The update (by its count) that last had a step skipped."""
        self._stepping_update = -1
        """The update (by its count) that the latest step belonged to."""
        self._in_a_row_before = 0
        """Updates with a skipped step in a row before the one being stepped."""
        self._configured_rates: list[tuple[torch.optim.Optimizer, float]] = []
        """Each optimizer `make_optimizer` built, with the learning rate it was built at."""
        self._optimizer_steps: dict[int, Callable[[], object]] = {}
        """Each optimizer's step, by the optimizer's id: its own, or a `CompiledStep`."""

    def make_optimizer(
        self, parameters: Iterable[nn.Parameter], lr: float | None = None
    ) -> torch.optim.Optimizer:
        """The configured optimizer (`learner.optimizer`, its eps and RMSprop's settings)
        over `parameters`, at `lr`: `learner.lr` when None (one network, one optimizer),
        or a part's own rate (SAC's actor, critics and temperature). The rate is remembered,
        so that a restored checkpoint gets the configured one back
        (`apply_optimizer_settings`)."""
        rate = self.settings.lr if lr is None else lr
        optimizer = build_optimizer(parameters, self.settings, rate)
        self._configured_rates.append((optimizer, rate))
        compiled = self.settings.compile_optimizer
        # `optimizer.step` looked up at each call: a schedule built later wraps it to count
        # the steps (and warns, wrongly, when the step it counts is not the one taken)
        self._optimizer_steps[id(optimizer)] = (
            CompiledStep(optimizer) if compiled else lambda: optimizer.step()
        )
        return optimizer

    @staticmethod
    def all_reduced(network: nn.Module) -> nn.Module:
        """`network` wrapped so that backward all-reduces its gradients with the other
        learners of the process group, when there is one (parameters are broadcast from
        rank 0 on wrapping); `network` itself otherwise."""
        if dist.is_available() and dist.is_initialized():
            return nn.parallel.DistributedDataParallel(network)
        return network

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        """A batch array on the learner's device."""
        # batches from Ray's object store are read-only views, which torch will not wrap
        writable = np.require(array, requirements=("C", "W"))
        return torch.from_numpy(writable).to(self.device, non_blocking=True)

    def step(
        self,
        loss: torch.Tensor,
        optimizer: torch.optim.Optimizer,
        parameters: Iterable[nn.Parameter],
    ) -> torch.Tensor:
        """Backward, clip the global gradient norm of `parameters` (what `optimizer`
        steps) to `learner.max_grad_norm`, step `optimizer`; returns the norm before
        clipping.

        A non-finite gradient norm (a NaN or infinite gradient anywhere) skips the optimizer
        step, so that one bad batch (a NaN reward, an overflow) never reaches the weights.
        `nonfinite` counts the updates with a skipped step (once per update, however many
        epochs it has), and the run stops after `learner.max_nonfinite_steps` of them in a
        row. The decision reads the gradient norm alone: with several learners the
        gradients are all-reduced first, so the norm, and the decision, is the same on all
        of them (a loss can be infinite on one learner while its clipped gradient is not).
        Reading it costs one device sync per step. Each of a learner's optimizers is
        guarded alone (a skipped critic step leaves the actor's step of the same update
        alone); an update with any skipped step counts once, and in a row, whichever of its
        steps it was.

        The clipping is `nn.utils.clip_grad_norm_`'s, applied only where it changes the
        gradients: that function multiplies every gradient by its factor even when the factor
        is clamped to 1 (a branch on it would cost a device sync, which this step pays for the
        guard anyway), a pass over all of them that a small network's update on a CPU pays for
        nothing (`learner.max_grad_norm: null`, or a norm below it)."""
        if self._stepping_update != self.updates:  # the first step of this update
            self._stepping_update = self.updates
            self._in_a_row_before = self.nonfinite.in_a_row
        parameters = list(parameters)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = global_norm([p.grad for p in parameters if p.grad is not None])
        norm = float(grad_norm)  # the step's one device sync
        if math.isfinite(norm):
            max_norm = self.settings.max_grad_norm
            if max_norm is not None and max_norm < norm + CLIP_EPS:  # the scale is below 1
                nn.utils.clip_grads_with_norm_(parameters, max_norm, grad_norm)
            self._optimizer_steps[id(optimizer)]()
            if self._skipped_in_update != self.updates:  # this update is clean so far
                self.nonfinite.in_a_row = 0
        else:
            optimizer.zero_grad(set_to_none=True)
            if self._skipped_in_update != self.updates:  # count each update once
                self._skipped_in_update = self.updates
                self.nonfinite.skipped += 1
            self.nonfinite.in_a_row = self._in_a_row_before + 1
        return grad_norm

    @abstractmethod
    def components(self) -> dict[str, Checkpointed]:
        """The parts a checkpoint holds, by name."""

    def get_weights(self) -> ModelInfo:
        weights = numpy_state_dict(self.acting_network)
        return ModelInfo(self.updates, weights, published_at=time.time())

    def set_policy_weights(self, info: ModelInfo) -> None:
        """Start from these acting weights (a warm start; the optimizer starts fresh)."""
        load_numpy_state_dict(self.acting_network, info.weights)

    def state_dict(self) -> dict[str, Any]:
        state = {name: part.state_dict() for name, part in self.components().items()}
        return {**state, "updates": self.updates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the checkpointed parts; the optimizer's settings stay the configured ones
        (`apply_optimizer_settings`)."""
        for name, part in self.components().items():
            part.load_state_dict(state[name])
        self.updates = int(state["updates"])
        self.apply_optimizer_settings()

    def apply_optimizer_settings(self) -> None:
        """Put the configured learning rates (and eps, RMSprop's alpha) into the optimizers
        and their schedules. An optimizer's state dict carries the rates it was saved with,
        and loading it would quietly undo a changed `learner.lr` on a resume (`--resume RUN
        --set learner.lr=...`) or a population-based-training perturbation: the checkpoint's
        moments are kept, its settings are not. A schedule (`LambdaLR`) goes on from its
        restored step, scaled from its optimizer's configured rate."""
        settings = self.settings
        rates = {id(optimizer): rate for optimizer, rate in self._configured_rates}
        for optimizer, rate in self._configured_rates:
            configured = {"lr": rate, "initial_lr": rate, "eps": settings.optimizer_eps}
            if isinstance(optimizer, torch.optim.RMSprop):
                configured["alpha"] = settings.rmsprop_alpha
            for group in optimizer.param_groups:
                if settings.compile_optimizer != isinstance(group["lr"], torch.Tensor):
                    # from a run that did (not) compile its step: a rate of this run's kind
                    rate_now = float(group["lr"])
                    compiled = settings.compile_optimizer
                    group["lr"] = torch.tensor(rate_now) if compiled else rate_now
                for key, value in configured.items():
                    if key in group:
                        set_group_value(group, key, value)
        for part in self.components().values():
            if isinstance(part, torch.optim.lr_scheduler.LambdaLR):
                rate = rates[id(part.optimizer)]
                part.base_lrs = [rate for _ in part.base_lrs]
                scheduled = [
                    base * factor(part.last_epoch)
                    for base, factor in zip(part.base_lrs, part.lr_lambdas, strict=True)
                ]
                for group, now in zip(part.optimizer.param_groups, scheduled, strict=True):
                    set_group_value(group, "lr", float(now))


def global_norm(gradients: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all of `gradients` together: `nn.utils.get_total_norm`'s value.

    On a CPU that function calls `torch._foreach_norm`, whose CPU kernel loops
    `linalg.vector_norm` over the tensors, and stacks their norms: the computation below,
    which gives the same value bit for bit. Around it, on every call, it groups the tensors
    by device and dtype and checks each tensor's type in Python: about 40% of the call for
    a small network's few tensors, paid at every optimizer step of an update that takes a
    few milliseconds (`bench/reports/benchmarks.md`, "The learner in a run"). Gradients on
    another device (CUDA's foreach kernel) or of mixed dtypes (grouped, so stacked in
    another order) go to torch's function."""
    first = gradients[0] if gradients else None
    norm: torch.Tensor
    if (
        first is None
        or first.device.type != "cpu"
        or any(g.device != first.device or g.dtype != first.dtype for g in gradients)
    ):
        norm = nn.utils.get_total_norm(gradients)
    else:
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g) for g in gradients])
        )
    return norm


def build_optimizer(
    parameters: Iterable[nn.Parameter], settings: LearnerConfig, lr: float
) -> torch.optim.Optimizer:
    """The configured optimizer (`learner.optimizer`) over `parameters` at `lr` (a tensor
    when its step is compiled: see the module's docstring)."""
    if settings.optimizer == "rmsprop":
        return torch.optim.RMSprop(
            parameters,
            lr=torch.tensor(lr) if settings.compile_optimizer else lr,
            alpha=settings.rmsprop_alpha,
            eps=settings.optimizer_eps,
            centered=settings.rmsprop_centered,
            # torch picks its per-tensor loop on a CPU (foreach on a GPU); the foreach step
            # computes the same and is faster for small networks such as MinAtar's on a CPU
            foreach=True,
        )
    # the fused kernel makes small networks' updates faster, CPU or GPU
    return torch.optim.Adam(parameters, lr=lr, eps=settings.optimizer_eps, fused=True)


def linear_decay(
    optimizer: torch.optim.Optimizer, total_updates: int, enabled: bool
) -> torch.optim.lr_scheduler.LambdaLR:
    """A learning-rate schedule falling linearly from the configured rate to 0 at
    `total_updates` (constant when not `enabled`)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda updates: max(0.0, 1.0 - updates / total_updates) if enabled else 1.0,
    )


def set_group_value(group: dict[str, Any], key: str, value: float) -> None:
    """Set a param group's setting; a tensor setting (a compiled step's learning rate) is
    filled in place, so that the compiled step keeps reading the tensor it was compiled
    with (a float in its place would be a constant of a new compile)."""
    current = group[key]
    if isinstance(current, torch.Tensor):
        current.fill_(value)
    else:
        group[key] = value


class IgnoredProfilerSpan(logging.Filter):
    """Drops dynamo's warning that it ignores `optimizer.step`'s profiler span, which every
    compile of an optimizer step prints: nothing a user could act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Profiler record function")


def quiet_ignored_profiler_span() -> None:
    """Install `IgnoredProfilerSpan` on the dynamo logger that says it, once."""
    dynamo = logging.getLogger(torch_internals.DYNAMO_CONTEXT_LOGGER)
    if not any(isinstance(known, IgnoredProfilerSpan) for known in dynamo.filters):
        dynamo.addFilter(IgnoredProfilerSpan())


class CompiledStep:
    """An optimizer's step compiled with torch.compile (`learner.compile_optimizer`).

    torch's eager RMSprop makes one pass over every parameter per operation of its update
    (seven for the centered one), and on a CPU those passes cost as much as the MinAtar
    network's forward and backward; compiled, it is one loop per parameter (the study:
    bench/reports/benchmarks.md). The first call compiles (seconds). Where compiling fails
    (no C++ compiler on a CPU machine, no Triton on a GPU one), the learner says so in one line and
    steps eagerly from then on, with the same results: the failed compile ran no step."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        quiet_ignored_profiler_span()
        self.optimizer = optimizer
        # (`optimizer.step` looked up at each call, as in `TorchLearner.make_optimizer`)
        self._step: Callable[[], object] = torch.compile(self._eager_step)
        self.compiled = True
        """False once compiling failed and the step is the eager one."""
        self._stepped = False

    def __call__(self) -> None:
        try:
            self._step()
            self._stepped = True
        except torch_internals.compile_failure_types(first_call=not self._stepped) as exc:
            lines = str(exc).strip().splitlines()
            logger.warning(
                "learner: compiling the %s step failed (%s); stepping eagerly instead "
                "(learner.compile_optimizer=false avoids the attempt)",
                type(self.optimizer).__name__,
                lines[0] if lines else type(exc).__name__,
            )
            self._step = self._eager_step
            self.compiled = False
            self._step()

    def _eager_step(self) -> None:
        self.optimizer.step()
