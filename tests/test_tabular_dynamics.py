"""The other learning dynamics: each reaches the point its theory says it reaches."""

import numpy as np
import pytest
from scipy.special import softmax

from nlhf.tabular import (
    make_game,
    mixture_md,
    nash_ema,
    nash_md,
    nash_mp,
    omwu,
    reference_policy,
    solve_regularized_nash,
)
from nlhf.tabular.measures import kl

GAME = make_game("random", 12, seed=5)
MU = reference_policy(12, "random", seed=5)
TAU = 0.2
PI_STAR = solve_regularized_nash(GAME.P, MU, TAU)


@pytest.mark.parametrize(
    ("name", "run"),
    [
        ("nash-mp", lambda: nash_mp(GAME.P, MU, tau=TAU, eta=1.0, steps=1500)),
        ("omwu", lambda: omwu(GAME.P, MU, tau=TAU, eta=0.5, steps=1500)),
        ("self-play", lambda: mixture_md(GAME.P, MU, tau=TAU, eta=0.5, steps=1500, beta=0.0)),
        ("nash-ema", lambda: nash_ema(GAME.P, MU, tau=TAU, eta=0.5, steps=3000, ema=0.1)),
    ],
)
def test_constant_step_dynamics_reach_the_equilibrium(name, run):
    traj = run()
    assert traj.shape[1] == 12
    np.testing.assert_allclose(traj.sum(axis=1), 1.0, atol=1e-12)
    assert kl(PI_STAR, traj[-1]) < 1e-12, name


def test_nash_md_with_decreasing_steps_approaches_the_equilibrium():
    traj = nash_md(GAME.P, MU, tau=TAU, eta=lambda t: 2 / (TAU * (t + 2)), steps=2000)
    distances = [kl(PI_STAR, traj[t]) for t in (10, 100, 1000, 2000)]
    assert distances == sorted(distances, reverse=True)
    assert distances[-1] < 1e-5


def test_nash_md_with_a_constant_step_stops_at_a_biased_point():
    """With constant η the fixed point solves π ∝ μ·exp(P π^μ / τ), not π* exactly: the gap
    shrinks with η (Theorem 1 bounds it by 2η/τ)."""
    gaps = [
        kl(PI_STAR, nash_md(GAME.P, MU, tau=TAU, eta=eta, steps=4000)[-1])
        for eta in (2.0, 0.5, 0.125)
    ]
    assert gaps[0] > gaps[1] > gaps[2] > 0
    assert all(g <= 2 * eta / TAU for g, eta in zip(gaps, (2.0, 0.5, 0.125), strict=True))


def test_mixture_with_beta_eta_tau_is_nash_md():
    eta = 0.5
    a = nash_md(GAME.P, MU, tau=TAU, eta=eta, steps=50)
    b = mixture_md(GAME.P, MU, tau=TAU, eta=eta, steps=50, beta=eta * TAU)
    # Nash-MD's step keeps the mixture as its anchor; mixture_md anchors at the same mixture
    # and plays against ν = the same mixture, so the two coincide.
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-15)


def test_best_response_converges_to_the_best_response_to_mu():
    traj = mixture_md(GAME.P, MU, tau=TAU, eta=0.5, steps=1500, beta=1.0)
    expected = softmax(np.log(MU) + GAME.P @ MU / TAU)
    np.testing.assert_allclose(traj[-1], expected, atol=1e-12)
    assert kl(PI_STAR, traj[-1]) > 1e-3  # …which is not the equilibrium


def test_progress_bar_does_not_change_results():
    a = nash_mp(GAME.P, MU, tau=TAU, eta=1.0, steps=20)
    b = nash_mp(GAME.P, MU, tau=TAU, eta=1.0, steps=20, progress=True)
    np.testing.assert_array_equal(a, b)


def test_tiny_probabilities_stay_exact():
    """Log-space updates keep probabilities far below the float range of exp without NaN."""
    from nlhf.tabular import cycle

    P = cycle(3, 0.5)
    mu = np.array([0.98, 0.01, 0.01])
    traj = nash_md(P, mu, tau=0.002, eta=400.0, steps=200)
    assert np.all(np.isfinite(traj))
    np.testing.assert_allclose(traj.sum(axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_bad_beta_and_ema(bad):
    with pytest.raises(ValueError, match="beta must be in"):
        mixture_md(GAME.P, MU, tau=TAU, eta=0.5, steps=1, beta=bad)
    with pytest.raises(ValueError, match="ema must be in"):
        nash_ema(GAME.P, MU, tau=TAU, eta=0.5, steps=1, ema=bad)
