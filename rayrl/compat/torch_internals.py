"""torch's private names (see `rayrl.compat`)."""

from __future__ import annotations

from rayrl.compat import fell_back, refuse_if_public_only

DYNAMO_CONTEXT_LOGGER = "torch._dynamo.variables.ctx_manager"
"""The logger through which torch.compile says, at every compile of an optimizer step, that
it ignores the step's profiler span (a logger's name: a wrong one filters nothing)."""


def compile_failure_types(first_call: bool) -> tuple[type[BaseException], ...]:
    """The errors by which a torch.compile'd call says that compiling failed: torch's own
    `BackendCompilerFailed`; where torch does not have it, any error of the `first_call`
    (the one that compiles; the caller then runs the eager function, which raises again if
    the error was not the compile's) and none of a later one."""
    try:
        refuse_if_public_only("torch._dynamo.exc.BackendCompilerFailed")
        import torch._dynamo.exc

        return (torch._dynamo.exc.BackendCompilerFailed,)
    except Exception as error:
        fell_back("torch's compile error type", error, "any error of the first compiled step")
        return (Exception,) if first_call else ()
