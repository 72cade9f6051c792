"""The RLHF route on preference games: equal to NLHF on Bradley–Terry games, not on cycles."""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from nlhf.tabular import (
    bradley_terry,
    condorcet,
    cycle,
    exploitability,
    fit_bradley_terry,
    make_game,
    reference_policy,
    rlhf_policy,
    solve_regularized_nash,
    total_variation,
    win_rate,
)


@given(st.lists(st.floats(-3, 3), min_size=2, max_size=10), st.integers(0, 1000))
def test_fit_recovers_bradley_terry_scores(scores, seed):
    s = np.asarray(scores)
    r = fit_bradley_terry(bradley_terry(s))
    np.testing.assert_allclose(r, s - s.mean(), atol=1e-8)


@given(st.lists(st.floats(-3, 3), min_size=2, max_size=10), st.sampled_from([0.05, 0.3, 2.0]))
@example([-2.6665187376428, 0.0, 2.3125, 1.0, -2.0373087591919914], 0.05)  # once stalled the fit
def test_bt_games_rlhf_and_nash_order_actions_identically(scores, tau):
    """On a BT game both answers tilt μ by a function increasing in the score."""
    s = np.asarray(scores)
    if np.min(np.abs(np.subtract.outer(s, s))[~np.eye(len(s), dtype=bool)]) < 1e-3:
        return  # near-ties make the order a matter of rounding
    mu = np.full(len(s), 1 / len(s))
    P = bradley_terry(s)
    nash = solve_regularized_nash(P, mu, tau)
    rlhf = rlhf_policy(fit_bradley_terry(P), mu, tau)
    assert list(np.argsort(nash / mu)) == list(np.argsort(rlhf / mu)) == list(np.argsort(s))


def test_bt_games_rlhf_equals_nash_as_tau_vanishes():
    game = make_game("bradley-terry", 8, seed=2)
    mu = reference_policy(8, "random", seed=2)
    gaps = []
    for tau in (0.3, 0.03, 0.003):
        nash = solve_regularized_nash(game.P, mu, tau)
        rlhf = rlhf_policy(fit_bradley_terry(game.P), mu, tau)
        gaps.append(total_variation(nash, rlhf))
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 1e-6  # both put all mass on the highest-scoring action


@pytest.mark.parametrize("tau", [0.01, 0.003])
def test_condorcet_rlhf_picks_what_a_majority_rejects(tau):
    P = condorcet()
    mu = np.full(3, 1 / 3)
    r = fit_bradley_terry(P)
    assert np.argmax(r) == 1  # the reward model ranks answer 1 first…
    assert P[0, 1] > 0.5 and P[0, 2] > 0.5  # …though a majority prefers 0 to every answer
    nash = solve_regularized_nash(P, mu, tau)
    rlhf = rlhf_policy(r, mu, tau)
    assert nash[0] > 0.99 and rlhf[1] > 0.99
    assert win_rate(P, nash, rlhf) > 0.55
    assert exploitability(P, rlhf, mu, tau) > 0.05 > 1e-10 > exploitability(P, nash, mu, tau)


def test_cycle_rlhf_differs_from_nash():
    """With a non-uniform reference on a cycle, the BT fit is flat (r = 0) and RLHF returns
    μ itself, while the equilibrium moves away from μ to counter the cycle."""
    P = cycle(3)
    mu = np.array([0.6, 0.3, 0.1])
    r = fit_bradley_terry(P)
    np.testing.assert_allclose(r, 0.0, atol=1e-12)
    rlhf = rlhf_policy(r, mu, 0.1)
    nash = solve_regularized_nash(P, mu, 0.1)
    np.testing.assert_allclose(rlhf, mu)
    assert total_variation(rlhf, nash) > 0.2
    assert exploitability(P, rlhf, mu, 0.1) > 0.05


def test_pair_weights_change_the_fit_on_intransitive_games():
    """A reward fitted to intransitive preferences depends on which pairs were compared."""
    P = make_game("random", 5, seed=1).P
    uniform = fit_bradley_terry(P)
    skewed = fit_bradley_terry(P, pair_weights=np.outer([5, 1, 1, 1, 1], [5, 1, 1, 1, 1]))
    assert np.abs(uniform - skewed).max() > 0.05


def test_separable_preferences_diverge_with_a_clear_error():
    P = np.array([[0.5, 1.0], [0.0, 0.5]])
    with pytest.raises(ValueError, match=r"reward is infinite.*groups \[\[\d\], \[\d\]\]"):
        fit_bradley_terry(P)
