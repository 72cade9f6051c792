"""The decoy and cycle predictions of :mod:`nlhf.tabular.lottery` against values worked by hand:
the population's P from its rankings, the Bradley–Terry step at ρ = 1 − 2w, the head-to-head
of 1 − w once RLHF takes the Borda pick, and ½ under a symmetric cycle."""

import numpy as np
import pytest

from nlhf.tabular.lottery import (
    CYCLE_OVERTURN,
    cycle_rankings,
    decoy_rankings,
    head_to_head,
    matched_beta,
    pair_distribution,
    predict,
    ranking_population,
    smoothed_shares,
    worst_case,
)
from nlhf.tabular.measures import kl
from nlhf.tabular.rlhf import fit_bradley_terry, rlhf_policy

A, B, C, OTHER = 0, 1, 2, 3
MU = np.array([0.37, 0.22, 0.07, 0.34])  # a reference that favours A, as SmolLM2 favours blue


def test_the_decoy_population_is_each_rankings_share_with_noise():
    P = ranking_population(*decoy_rankings(0.4), noise=0.05)
    # A ≻ B only for the w group: 0.4·0.95 + 0.6·0.05
    assert P[A, B] == pytest.approx(0.41)
    assert P[A, C] == pytest.approx(0.95)  # both groups rank A over C
    assert P[B, C] == pytest.approx(0.6 * 0.95 + 0.4 * 0.05)
    assert np.allclose(P[:3, OTHER], 0.95)
    assert np.allclose(P + P.T, 1.0) and np.allclose(np.diag(P), 0.5)


@pytest.mark.parametrize("noise,other", [(0.05, 0.0), (0.05, 0.1), (0.15, 0.3)])
def test_the_bradley_terry_fit_flips_from_b_to_a_exactly_at_rho_one_minus_two_w(noise, other):
    w = 0.4
    P = ranking_population(*decoy_rankings(w), noise=noise)

    k = 4 if other else 3  # with no other answers among the pairs: the three options alone

    def gap(rho):
        q = pair_distribution(rho, other)[:k]
        r = fit_bradley_terry(P[:k, :k], pair_weights=np.outer(q, q))
        return r[A] - r[B]

    # the first-order conditions give r_A = r_B iff ρ·w = (1 − ρ)(1 − 2w)/2, i.e. ρ = 1 − 2w
    assert gap(1 - 2 * w) == pytest.approx(0.0, abs=1e-9)
    assert gap(0.15) < 0 < gap(0.3)


def test_rlhf_steps_to_the_borda_pick_while_the_nash_equilibrium_stays_on_b():
    w, noise = 0.4, 0.05
    P = ranking_population(*decoy_rankings(w), noise=noise)
    condorcet_margin = 0.5 + (1 - 2 * noise) * (0.5 - w)  # P(B ≻ A) = 0.59
    for rho in (0.05, 0.15, 0.3, 0.45):
        cell = predict(P, MU, pair_distribution(rho, 0.1), tau=0.01)
        assert cell.nash[B] > 0.99  # the lottery ignores the decoy
        if rho < 1 - 2 * w:
            assert cell.rlhf[B] > 0.99
            assert cell.nash_vs_rlhf == pytest.approx(0.5, abs=0.005)
        else:
            assert cell.rlhf[A] > 0.99
            assert cell.nash_vs_rlhf == pytest.approx(condorcet_margin, abs=0.005)
            assert cell.worst_case_rlhf == pytest.approx(1 - condorcet_margin, abs=0.005)


def test_the_head_to_head_is_exactly_one_half_under_a_symmetric_cycle():
    P = ranking_population(*cycle_rankings(0.0), noise=0.05)
    for i, j in ((A, B), (B, C), (C, A)):  # each by two of the three rotations
        assert P[i, j] == pytest.approx(0.5 + 0.9 * (2 / 3 - 0.5))
    P, mu = P[:3, :3], np.full(3, 1 / 3)  # the three options, alike in every way
    for tau, beta in ((0.02, None), (0.1, 0.05), (1.0, 3.0)):
        cell = predict(P, mu, np.full(3, 1 / 3), tau=tau, beta=beta)
        assert np.ptp(cell.reward) == pytest.approx(0.0, abs=1e-9)  # Borda sees equals
        assert cell.nash_vs_rlhf == pytest.approx(0.5, abs=1e-9)
        np.testing.assert_allclose(cell.nash, 1 / 3, atol=1e-9)
        assert cell.worst_case_nash == pytest.approx(0.5, abs=1e-9)


def test_under_a_cycle_rlhfs_worst_case_is_the_type_that_beats_its_pick():
    lam, noise = 0.1, 0.05
    P = ranking_population(*cycle_rankings(lam), noise=noise)
    # pure A (the quality's pick) loses to C by the cycle: ½ − (1 − 2ε)((1 − λ)·⅔ − ½)
    rate, j = worst_case(P, np.array([1.0, 0, 0, 0]))
    assert j == C and rate == pytest.approx(0.5 - (1 - 2 * noise) * ((1 - lam) * 2 / 3 - 0.5))
    cell = predict(P, np.full(4, 0.25), pair_distribution(None, 0.1), tau=0.01, beta=0.01)
    assert cell.rlhf[A] > 0.9 and cell.worst_case_rlhf < 0.47
    assert cell.worst_case_nash > 0.49  # the lottery mixes: nobody beats it by much
    assert cell.nash_vs_rlhf == pytest.approx(0.5, abs=0.02)  # still ½ head to head


def test_the_cycle_is_overturned_at_a_quality_share_of_one_quarter():
    for lam, cycles in ((CYCLE_OVERTURN - 0.01, True), (CYCLE_OVERTURN + 0.01, False)):
        P = ranking_population(*cycle_rankings(lam), noise=0.1)
        assert bool(P[C, A] > 0.5) is cycles
    P = ranking_population(*cycle_rankings(0.4), noise=0.05)
    cell = predict(P, np.full(4, 0.25), pair_distribution(None, 0.1), tau=0.01)
    assert cell.nash[A] > 0.95 and cell.rlhf[A] > 0.95  # A wins outright: both pick it


def test_beta_is_paired_to_tau_by_equal_kl_of_the_type_distribution():
    P = ranking_population(*decoy_rankings(0.4), noise=0.05)
    cell = predict(P, MU, pair_distribution(0.05, 0.1), tau=0.05)
    assert cell.kl_rlhf == pytest.approx(cell.kl_nash, rel=1e-6)
    reward = np.array(cell.reward)
    beta = matched_beta(reward, MU, 0.3)
    assert kl(rlhf_policy(reward, MU, beta), MU) == pytest.approx(0.3, rel=1e-6)
    assert head_to_head(P, MU, MU) == pytest.approx(0.5)


def test_bad_populations_are_refused():
    with pytest.raises(ValueError, match="noise"):
        ranking_population(*decoy_rankings(0.4), noise=0.0)
    with pytest.raises(ValueError, match="shares"):
        ranking_population([(0, 1)], [0.5], noise=0.1)
    with pytest.raises(ValueError, match="order all"):
        ranking_population([(0, 0)], [1.0], noise=0.1)
    with pytest.raises(ValueError, match="w must"):
        decoy_rankings(1.0)


def test_smoothed_shares_keep_a_missing_type_positive():
    shares = smoothed_shares([10, 0, 5, 5])
    assert shares[1] > 0 and shares.sum() == pytest.approx(1.0)
    assert shares[0] == pytest.approx(10.5 / 22)
