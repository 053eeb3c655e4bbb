"""V-trace off-policy correction (Espeholt et al. 2018, IMPALA), as a pure function.

Time-major tensors of shape (T, B). Episodes may end inside an unroll: `discounts` is
gamma, or 0 after a termination (no bootstrap); `continues` is 0 after *any* episode end
(termination or truncation), so that the correction never flows from the next episode back
into this one. `next_values[t]` is V(x_{t+1}): the next observation's value, the final
observation's value after a truncation, anything after a termination (it is discounted away).

`trace_lambda` is the lambda of the paper's section 4.1 (as in Retrace(lambda)): the trace
coefficients become c_t = lambda * min(c_bar, pi/mu), which on-policy turns the n-step
return into the TD(lambda) return, trading the unroll's variance for the value's bias (the
MinAtar paper's AC(lambda) uses 0.8). 1 is plain V-trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class VTraceReturns:
    vs: torch.Tensor
    """V-trace value targets v_s, (T, B)."""
    pg_advantages: torch.Tensor
    """rho_s * (r_s + gamma * v_{s+1} - V(x_s)), (T, B)."""


@torch.no_grad()
def vtrace(
    behaviour_logp: torch.Tensor,
    target_logp: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    continues: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
    pg_rho_clip: float = 1.0,
    trace_lambda: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and policy-gradient advantages.

    v_s = V(x_s) + sum_t (prod_{i<t} gamma_i c_i) delta_t, with
    delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)), rho_t = min(rho_clip, pi/mu),
    c_t = trace_lambda * min(c_clip, pi/mu); computed backwards as
    v_s - V(x_s) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1})).
    On-policy (pi = mu, clips >= 1) v_s is the n-step bootstrapped return, or with
    trace_lambda < 1 the TD(lambda) return.

    The policy gradient's advantage is min(pg_rho_clip, pi/mu) (q_s - V(x_s)) with
    q_s = r_s + gamma_s v_{s+1} (the paper's), where with trace_lambda < 1 the bootstrap is
    lambda v_{s+1} + (1 - lambda) V(x_{s+1}), as DeepMind's rlax computes it: on-policy the
    advantage is then the TD(lambda) return's, and lambda 0 gives the one-step TD error.
    """
    rhos = torch.exp(target_logp - behaviour_logp)
    clipped_rhos = torch.clamp(rhos, max=rho_clip)
    cs = trace_lambda * torch.clamp(rhos, max=c_clip)
    deltas = clipped_rhos * (rewards + discounts * next_values - values)

    vs_minus_values = torch.zeros_like(values)
    carry = torch.zeros_like(values[0])
    for t in reversed(range(values.shape[0])):
        carry = deltas[t] + discounts[t] * continues[t] * cs[t] * carry
        vs_minus_values[t] = carry
    vs = values + vs_minus_values

    # what q_s bootstraps from: inside an episode lambda v_{s+1} + (1 - lambda) V(x_{s+1}),
    # else (and after the unroll) the bootstrap value
    vs_next = next_values.clone()
    inside = continues[:-1] > 0
    mixed = trace_lambda * vs[1:] + (1.0 - trace_lambda) * next_values[:-1]
    vs_next[:-1] = torch.where(inside, mixed, next_values[:-1])
    pg_advantages = torch.clamp(rhos, max=pg_rho_clip) * (rewards + discounts * vs_next - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)
