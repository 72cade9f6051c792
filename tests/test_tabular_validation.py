"""Bad input to the tabular lab: a ValueError that says which check failed and by how much."""

import numpy as np
import pytest

from nlhf.tabular import cycle, nash_md, nash_mp, solve_regularized_nash

P = cycle(3)
MU = np.full(3, 1 / 3)


@pytest.mark.parametrize(
    ("bad_P", "message"),
    [
        (np.full((3, 2), 0.5), r"square matrix, got shape \(3, 2\)"),
        (np.array([0.5, 0.5]), r"square matrix"),
        (np.array([[0.5]]), r"at least 2 actions"),
        (np.array([[0.5, 1.2], [-0.2, 0.5]]), r"\[0, 1\].*outside by 0.2"),
        (np.array([[0.5, 0.7], [0.4, 0.5]]), r"P \+ Pᵀ must equal 1.*off by 0.1"),
        (np.array([[0.6, 0.5], [0.5, 0.4]]), r"P \+ Pᵀ must equal 1.*P\[0, 0\].*off by 0.2"),
        (np.array([[0.5, np.nan], [0.5, 0.5]]), r"not finite"),
    ],
)
def test_bad_preference_matrix(bad_P, message):
    with pytest.raises(ValueError, match=message):
        solve_regularized_nash(bad_P, np.full(bad_P.shape[0] if bad_P.ndim else 1, 0.5), 0.1)


@pytest.mark.parametrize(
    ("bad_mu", "message"),
    [
        (np.array([0.5, 0.5, 0.0]), r"strictly positive.*index 2"),
        (np.array([0.5, 0.6, -0.1]), r"strictly positive.*index 2"),
        (np.array([0.3, 0.3, 0.3]), r"sum to 1, sums to 0.9.*off by -0.1"),
        (np.array([0.5, 0.5]), r"shape \(3,\)"),
    ],
)
def test_bad_reference(bad_mu, message):
    with pytest.raises(ValueError, match=message):
        solve_regularized_nash(P, bad_mu, 0.1)
    with pytest.raises(ValueError, match=message):
        nash_md(P, bad_mu, tau=0.1, eta=1.0, steps=3)


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_tau(tau):
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        solve_regularized_nash(P, MU, tau)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        nash_md(P, MU, tau=tau, eta=0.1, steps=3)


def test_eta_tau_above_one_says_by_how_much():
    with pytest.raises(ValueError, match=r"eta·tau=1.5 exceeds 1 by 0.5"):
        nash_md(P, MU, tau=0.5, eta=3.0, steps=3)
    with pytest.raises(ValueError, match=r"at step 2: eta=1.5.*exceeds 1 by 0.5"):
        nash_md(P, MU, tau=1.0, eta=lambda t: 0.5 * (t + 1), steps=5)
    with pytest.raises(ValueError, match=r"eta must be a finite number > 0"):
        nash_mp(P, MU, tau=1.0, eta=0.0, steps=1)


def test_bad_pi0_and_steps():
    with pytest.raises(ValueError, match="pi0 must be strictly positive"):
        nash_md(P, MU, tau=0.1, eta=1.0, steps=3, pi0=np.array([1.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="steps must be a non-negative integer"):
        nash_md(P, MU, tau=0.1, eta=1.0, steps=-1)
