"""Theorem 1 of the NLHF paper, checked step by step on many random games.

KL(π*, π_{t+1}) ≤ (1 − η_t τ)·KL(π*, π_t) + 2η_t²   at every step, and with η_t = 2/(τ(t+2))
the last iterate satisfies KL(π*, π_T) ≤ 8/(τ²(T+1)).
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from nlhf.tabular import nash_md, solve_regularized_nash, theorem_schedule
from nlhf.tabular.measures import kl_rows
from strategies import games, taus

SLACK = 1e-12  # rounding of the KL computation


@given(games(), taus, st.floats(0.01, 1.0), st.integers(5, 60))
def test_one_step_contraction_constant_eta(game, tau, eta_tau, steps):
    P, mu = game
    eta = eta_tau / tau  # every admissible η·τ ∈ (0, 1]
    pi_star = solve_regularized_nash(P, mu, tau)
    d = kl_rows(pi_star, nash_md(P, mu, tau=tau, eta=eta, steps=steps))
    bound = (1 - eta * tau) * d[:-1] + 2 * eta**2
    assert np.all(d[1:] <= bound + SLACK), float(np.max(d[1:] - bound))


@given(games(), taus, st.integers(5, 200))
def test_one_step_contraction_theorem_schedule(game, tau, steps):
    P, mu = game
    schedule = theorem_schedule(tau)
    pi_star = solve_regularized_nash(P, mu, tau)
    d = kl_rows(pi_star, nash_md(P, mu, tau=tau, eta=schedule, steps=steps))
    etas = np.array([schedule(t) for t in range(steps)])
    bound = (1 - etas * tau) * d[:-1] + 2 * etas**2
    assert np.all(d[1:] <= bound + SLACK)


@given(games(), taus, st.integers(1, 400))
def test_last_iterate_rate(game, tau, steps):
    P, mu = game
    pi_star = solve_regularized_nash(P, mu, tau)
    traj = nash_md(P, mu, tau=tau, eta=theorem_schedule(tau), steps=steps)
    d = kl_rows(pi_star, traj)
    t = np.arange(1, steps + 1)
    assert np.all(d[1:] <= 8 / (tau**2 * (t + 1)) + SLACK)


def naive_nash_md_step(P, mu, pi, eta, tau):
    """The update written literally with probabilities, as in the paper."""
    mix = pi ** (1 - eta * tau) * mu ** (eta * tau)
    mix /= mix.sum()
    new = mix * np.exp(eta * (P @ mix))
    return new / new.sum()


@given(games(max_n=6), taus, st.floats(0.05, 1.0))
def test_update_is_the_papers_formula(game, tau, eta_tau):
    P, mu = game
    eta = eta_tau / tau
    traj = nash_md(P, mu, tau=tau, eta=eta, steps=5)
    pi = mu
    for t in range(5):
        pi = naive_nash_md_step(P, mu, pi, eta, tau)
        np.testing.assert_allclose(traj[t + 1], pi, rtol=1e-9, atol=1e-14)


def test_pi0_and_callable_eta():
    P = np.array([[0.5, 0.9, 0.1], [0.1, 0.5, 0.9], [0.9, 0.1, 0.5]])
    mu = np.array([0.7, 0.2, 0.1])
    pi0 = np.array([0.2, 0.3, 0.5])
    traj = nash_md(P, mu, tau=0.5, eta=lambda t: 1.0 / (t + 1), steps=3, pi0=pi0)
    assert traj.shape == (4, 3)
    np.testing.assert_array_equal(traj[0], pi0)
    np.testing.assert_allclose(traj[1], naive_nash_md_step(P, mu, pi0, 1.0, 0.5), rtol=1e-12)
    np.testing.assert_allclose(traj[2], naive_nash_md_step(P, mu, traj[1], 0.5, 0.5), rtol=1e-12)
    np.testing.assert_allclose(nash_md(P, mu, tau=0.5, eta=0.1, steps=0), mu[None, :])
