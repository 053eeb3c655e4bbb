"""V-trace against hand-computed values (T=3, gamma=0.9, one batch column)."""

from __future__ import annotations

import math

import pytest
import torch

from rayrl.algorithms.vtrace import vtrace


def col(*values):
    return torch.tensor(values, dtype=torch.float64)[:, None]


REWARDS = col(1, 2, 3)
VALUES = col(0.5, 1.0, 1.5)


def run(
    log_rhos=(0, 0, 0),
    discounts=(0.9, 0.9, 0.9),
    continues=(1, 1, 1),
    next_values=(1.0, 1.5, 2.0),
    **clips,
):
    behaviour = col(0, 0, 0)
    return vtrace(
        behaviour,
        behaviour + col(*log_rhos),
        REWARDS,
        col(*discounts),
        col(*continues),
        VALUES,
        col(*next_values),
        **clips,
    )


def test_on_policy_vtrace_is_the_n_step_return():
    out = run()
    # v_2 = 3 + .9*2 ; v_1 = 2 + .9*3 + .81*2 ; v_0 = 1 + .9*2 + .81*3 + .729*2
    assert out.vs[:, 0].tolist() == pytest.approx([6.688, 6.32, 4.8])
    # r_t + gamma v_{t+1} - V(x_t), with v_3 = V(x_3) = 2
    assert out.pg_advantages[:, 0].tolist() == pytest.approx([6.188, 5.32, 3.3])


def test_off_policy_ratios_are_clipped():
    out = run(log_rhos=(math.log(2.0), math.log(0.5), 0.0))
    # rho/c: t0 -> 1 (clipped from 2), t1 -> 0.5, t2 -> 1
    # deltas: 1.4, 0.5 * 2.35, 3.3 ; v - V: 3.3, 1.175 + .9*.5*3.3, 1.4 + .9*1*2.66
    assert out.vs[:, 0].tolist() == pytest.approx([4.294, 3.66, 4.8])
    assert out.pg_advantages[:, 0].tolist() == pytest.approx([3.794, 2.66, 3.3])


def test_truncation_mid_unroll_bootstraps_from_the_final_observation():
    # the episode is cut after t=1; V(final obs) = 10; t=2 starts a new episode
    out = run(continues=(1, 0, 1), next_values=(1.0, 10.0, 2.0))
    assert out.vs[:, 0].tolist() == pytest.approx([10.9, 11.0, 4.8])
    assert out.pg_advantages[:, 0].tolist() == pytest.approx([10.4, 10.0, 3.3])


def test_termination_mid_unroll_does_not_bootstrap():
    out = run(discounts=(0.9, 0.0, 0.9), continues=(1, 0, 1), next_values=(1.0, 99.0, 2.0))
    assert out.vs[:, 0].tolist() == pytest.approx([2.8, 2.0, 4.8])
    assert out.pg_advantages[:, 0].tolist() == pytest.approx([2.3, 1.0, 3.3])


def test_batch_columns_are_independent():
    single = run()
    both = vtrace(
        torch.zeros(3, 2, dtype=torch.float64),
        torch.zeros(3, 2, dtype=torch.float64),
        REWARDS.repeat(1, 2),
        col(0.9, 0.9, 0.9).repeat(1, 2),
        torch.ones(3, 2, dtype=torch.float64),
        VALUES.repeat(1, 2),
        col(1.0, 1.5, 2.0).repeat(1, 2),
    )
    torch.testing.assert_close(both.vs[:, 1:], single.vs)


def lambda_returns(lam: float) -> list[float]:
    """The TD(lambda) return of the three steps, by its textbook recursion:
    G_t = r_t + gamma ((1 - lambda) V(x_{t+1}) + lambda G_{t+1}), G_3 = V(x_3)."""
    rewards, next_values = [1.0, 2.0, 3.0], [1.0, 1.5, 2.0]
    following = next_values[-1]
    returns = []
    for reward, next_value in zip(reversed(rewards), reversed(next_values), strict=True):
        following = reward + 0.9 * ((1 - lam) * next_value + lam * following)
        returns.append(following)
    return returns[::-1]


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.8, 1.0])
def test_on_policy_vtrace_with_lambda_is_the_td_lambda_return(lam):
    out = run(trace_lambda=lam)
    assert out.vs[:, 0].tolist() == pytest.approx(lambda_returns(lam))
    # on-policy, the policy gradient's advantage is the TD(lambda) return's
    expected = [g - value for g, value in zip(lambda_returns(lam), [0.5, 1.0, 1.5], strict=True)]
    assert out.pg_advantages[:, 0].tolist() == pytest.approx(expected)


def test_lambda_scales_the_clipped_traces():
    # off-policy, lambda 0.5: c_t = 0.5 * min(1, rho_t) = 0.5, 0.25, 0.5
    out = run(log_rhos=(math.log(2.0), math.log(0.5), 0.0), trace_lambda=0.5)
    # deltas 1.4, 1.175, 3.3; v_2 - V = 3.3; v_1 - V = 1.175 + .9*.25*3.3 = 1.9175;
    # v_0 - V = 1.4 + .9*.5*1.9175 = 2.262875
    assert out.vs[:, 0].tolist() == pytest.approx([2.762875, 2.9175, 4.8])
