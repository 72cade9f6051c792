"""The exact regularized Nash solver: fixed-point identity, equilibrium property, hard cases."""

import numpy as np
import pytest
from hypothesis import given

from nlhf.tabular import (
    cycle,
    exploitability,
    make_game,
    nash_mp,
    reference_policy,
    solve_regularized_nash,
    win_rate,
)
from strategies import games, taus


def fixed_point_map(P, mu, tau, pi):
    z = np.log(mu) + P @ pi / tau
    w = np.exp(z - z.max())
    return w / w.sum()


@given(games(), taus)
def test_fixed_point_identity(game, tau):
    P, mu = game
    pi = solve_regularized_nash(P, mu, tau)
    assert pi.shape == mu.shape
    assert abs(pi.sum() - 1) < 1e-12 and np.all(pi > 0)
    assert np.max(np.abs(fixed_point_map(P, mu, tau, pi) - pi)) < 1e-10


@given(games(max_n=6), taus)
def test_no_deviation_gains(game, tau):
    """π* is a best response to itself in the regularized game: exploitability 0."""
    P, mu = game
    pi = solve_regularized_nash(P, mu, tau)
    assert exploitability(P, pi, mu, tau) < 1e-10
    # and any other policy is exploitable
    other = 0.5 * pi + 0.5 * np.roll(pi, 1)
    if np.abs(other - pi).max() > 1e-3:
        assert exploitability(P, other, mu, tau) > 1e-8


def test_agrees_with_an_independent_method():
    """Mirror prox run to convergence reaches the same point to 1e-10 in every coordinate."""
    game = make_game("random", 30, seed=3)
    mu = reference_policy(30, "random", seed=3)
    tau = 0.05
    pi = solve_regularized_nash(game.P, mu, tau)
    traj = nash_mp(game.P, mu, tau=tau, eta=1.0, steps=3000)
    assert np.max(np.abs(traj[-1] - pi)) < 1e-10


@pytest.mark.parametrize("tau", [1e-3, 1e-4])
def test_small_tau_large_game(tau):
    """Logits spanning hundreds of nats: the continuation path still converges."""
    P = cycle(200)
    mu = reference_policy(200, "random", seed=1)
    pi = solve_regularized_nash(P, mu, tau)
    rel = np.abs(fixed_point_map(P, mu, tau, pi) - pi)
    assert rel.max() < 1e-10


def test_symmetric_cycle_uniform_reference():
    """Rock-paper-scissors with a uniform reference: the equilibrium is uniform."""
    pi = solve_regularized_nash(cycle(3), np.full(3, 1 / 3), 0.1)
    np.testing.assert_allclose(pi, np.full(3, 1 / 3), atol=1e-14)
    assert win_rate(cycle(3), pi, np.array([1.0, 0, 0])) == pytest.approx(0.5)


def test_large_tau_approaches_reference():
    game = make_game("random", 6)
    mu = reference_policy(6, "random")
    pi = solve_regularized_nash(game.P, mu, 1e4)
    np.testing.assert_allclose(pi, mu, atol=1e-4)
