"""Win-rate matrices, intervals over prompts and judge disagreement (pure numpy)."""

import numpy as np
import pytest
from scipy import stats

from nlhf.eval.stats import disagreement, mean_interval, per_prompt, win_rate_matrix, winners


def test_t_interval_matches_the_textbook_formula():
    x = np.array([0.2, 0.9, 0.4, 0.7, 0.55, 0.3])
    est = mean_interval(x)
    half = stats.t.ppf(0.975, 5) * x.std(ddof=1) / np.sqrt(6)
    assert est.mean == pytest.approx(x.mean())
    assert (est.low, est.high) == pytest.approx((x.mean() - half, x.mean() + half))
    assert est.n == 6


def test_samples_are_averaged_within_a_prompt_first():
    per = np.array([0.1, 0.8, 0.5, 0.9])
    repeated = np.repeat(per[:, None], 4, axis=1)  # 4 identical samples per prompt
    one, four = mean_interval(per), mean_interval(repeated)
    # Duplicated samples carry no new information: the interval must not shrink.
    assert (four.low, four.high, four.n) == pytest.approx((one.low, one.high, one.n))
    assert per_prompt(np.ones((3, 2, 2))).shape == (3,)


def test_interval_is_clipped_to_bounds_and_undefined_for_one_prompt():
    est = mean_interval(np.array([0.0, 1.0, 1.0]), bounds=(0.0, 1.0))
    assert 0.0 <= est.low < est.mean < est.high == 1.0
    lone = mean_interval(np.array([[0.3, 0.5]]))
    assert lone.mean == pytest.approx(0.4) and np.isnan(lone.low) and np.isnan(lone.high)
    assert lone.as_dict()["low"] is None


def test_bootstrap_is_seeded_and_close_to_t():
    x = np.random.default_rng(1).uniform(size=400)
    t, b1, b2 = (
        mean_interval(x),
        mean_interval(x, method="bootstrap", seed=3),
        mean_interval(x, method="bootstrap", seed=3),
    )
    assert (b1.low, b1.high) == (b2.low, b2.high)
    assert b1.low == pytest.approx(t.low, abs=0.01) and b1.high == pytest.approx(t.high, abs=0.01)


def test_t_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(1000):
        # 40 prompts, each with its own win probability, 4 correlated samples per prompt.
        p = rng.beta(3, 2, size=40)
        x = rng.binomial(1, np.repeat(p[:, None], 4, axis=1))
        est = mean_interval(x)
        hits += est.low <= 0.6 <= est.high
    assert 0.93 <= hits / 1000 <= 0.97


def three_policies(n=30, seed=0):
    rng = np.random.default_rng(seed)
    return {
        (0, 1): rng.uniform(0.5, 1.0, size=(n, 4)),
        (0, 2): rng.uniform(0.0, 1.0, size=(n, 4)),
        (1, 2): rng.uniform(0.0, 0.3, size=(n, 4)),
    }


def test_win_rate_matrix_is_complementary_with_half_on_the_diagonal():
    prefs = three_policies()
    rates = win_rate_matrix(prefs, 3)
    assert np.allclose(np.diag(rates.mean), 0.5)
    assert np.allclose(rates.mean + rates.mean.T, 1.0)
    assert np.allclose(rates.low + rates.high.T, 1.0)  # intervals reflect
    assert rates.mean[0, 1] == pytest.approx(prefs[(0, 1)].mean())
    assert (rates.low <= rates.mean).all() and (rates.mean <= rates.high).all()
    # versus_rest: the average of a row over the other columns.
    assert rates.versus_rest[2].mean == pytest.approx((rates.mean[2, 0] + rates.mean[2, 1]) / 2)
    assert rates.as_dict()["win_rate"][1][0] == pytest.approx(1 - prefs[(0, 1)].mean())


def test_win_rate_matrix_rejects_bad_input():
    prefs = three_policies()
    with pytest.raises(ValueError, match=r"missing \[\(1, 2\)\]"):
        win_rate_matrix({k: v for k, v in prefs.items() if k != (1, 2)}, 3)
    with pytest.raises(ValueError, match="same prompts"):
        win_rate_matrix({**prefs, (1, 2): prefs[(1, 2)][:5]}, 3)
    with pytest.raises(ValueError, match=r"pair \(0, 2\).*\[0, 1\]"):
        win_rate_matrix({**prefs, (0, 2): prefs[(0, 2)] + 1.0}, 3)
    with pytest.raises(ValueError, match="at least 2"):
        win_rate_matrix({}, 1)


def test_winners_with_ties():
    assert winners(np.array([0.9, 0.1, 0.5, 0.5 + 1e-9])).tolist() == [1, -1, 0, 0]


def test_identical_judges_never_disagree():
    prefs = three_policies()
    d = disagreement(prefs, prefs, 3)
    assert np.allclose(d.difference, 0.0)
    assert np.allclose(d.different_winner[~np.eye(3, dtype=bool)], 0.0)
    assert d.overall.mean == 0.0


def test_opposite_judges_always_disagree_and_differences_are_antisymmetric():
    prefs = three_policies()
    flipped = {k: 1.0 - v for k, v in prefs.items()}
    d = disagreement(prefs, flipped, 3)
    assert d.overall.mean == pytest.approx(1.0)
    assert d.difference[0, 1] == pytest.approx(2 * prefs[(0, 1)].mean() - 1)
    assert np.allclose(d.difference, -d.difference.T)
    assert np.isnan(d.different_winner[1, 1])


def test_disagreement_counts_ties_and_hand_computed_fractions():
    first = {(0, 1): np.array([[0.9, 0.2], [0.6, 0.5]])}
    second = {(0, 1): np.array([[0.7, 0.6], [0.5, 0.5]])}
    d = disagreement(first, second, 2)
    # comparisons: agree, differ, differ (win vs tie), agree (tie, tie)
    assert d.different_winner[0, 1] == pytest.approx(0.5)
    assert d.overall.mean == pytest.approx(0.5)
    assert d.difference[0, 1] == pytest.approx(np.mean([0.2, -0.4, 0.1, 0.0]))
    with pytest.raises(ValueError, match="same ones"):
        disagreement(first, {(0, 1): np.full((2, 3), 0.5)}, 2)


def test_length_control_removes_a_preference_for_length_and_keeps_one_for_quality():
    """Policy 0 writes longer completions; judge 1 likes only length, judge 2 likes policy 0
    by a fixed logit of 1 whatever the length: the raw win rate of 0 is high under both, the
    length-controlled one is ½ under the first and σ(1) under the second."""
    from nlhf.eval.stats import length_controlled

    rng = np.random.default_rng(0)
    gaps = {(0, 1): rng.normal(8.0, 4.0, size=(300, 4))}
    sd = gaps[(0, 1)].std()
    p_length = 1 / (1 + np.exp(-3 * np.tanh(gaps[(0, 1)] / sd)))
    for_length = {(0, 1): (rng.random(p_length.shape) < p_length).astype(float)}  # labels
    for_quality = {(0, 1): np.full((300, 4), 1 / (1 + np.exp(-1.0)))}
    assert win_rate_matrix(for_length, 2).mean[0, 1] > 0.8
    lc = length_controlled(for_length, gaps, 2)
    assert abs(lc.mean[0, 1] - 0.5) < 0.1 and lc.low[0, 1] < 0.5 < lc.high[0, 1]
    assert lc.slope[0, 1] == pytest.approx(3.0, abs=0.6)
    lc = length_controlled(for_quality, gaps, 2)
    assert lc.mean[0, 1] == pytest.approx(1 / (1 + np.exp(-1.0)), abs=1e-6)
    assert lc.mean[1, 0] == pytest.approx(1 - lc.mean[0, 1]) and abs(lc.slope[0, 1]) < 1e-3


def test_worst_case_is_the_lowest_row_entry_and_names_the_opponent():
    """A rock-paper-scissors triple plus a policy that loses to everyone: each cyclic policy
    beats the loser 0.9 but its worst case is 0.2, where 'vs rest' still reads above ½."""
    P = np.array(
        [
            [0.5, 0.8, 0.2, 0.9],
            [0.2, 0.5, 0.8, 0.9],
            [0.8, 0.2, 0.5, 0.9],
            [0.1, 0.1, 0.1, 0.5],
        ]
    )
    rng = np.random.default_rng(0)
    n = 200
    prefs = {
        (a, b): np.clip(P[a, b] + rng.normal(0, 0.05, size=(n, 4)), 0, 1)
        for a in range(4)
        for b in range(a + 1, 4)
    }
    rates = win_rate_matrix(prefs, 4)
    assert [round(e.mean, 1) for e in rates.worst_case] == [0.2, 0.2, 0.2, 0.1]
    assert rates.worst_opponent[:3] == [2, 0, 1]
    assert all(rates.versus_rest[a].mean > 0.6 for a in range(3))
    for e in rates.worst_case:
        assert e.low < e.mean < e.high and e.high - e.low < 0.05
    # per prompt the best response picks the entrant that does best there: never above the
    # worst case, and here below it where the cyclic rows' noise differs from prompt to prompt
    for a in range(4):
        assert rates.best_response[a].mean <= rates.worst_case[a].mean + 1e-12
    assert rates.best_response[3].mean < rates.worst_case[3].mean


def test_worst_case_of_two_policies_is_their_head_to_head():
    rng = np.random.default_rng(1)
    rates = win_rate_matrix({(0, 1): rng.uniform(0.5, 0.9, size=(30, 2))}, 2)
    assert rates.worst_case[0].mean == pytest.approx(rates.mean[0, 1])
    assert rates.worst_case[1].mean == pytest.approx(rates.mean[1, 0])
    assert rates.best_response[0].mean == pytest.approx(rates.mean[0, 1])
    assert rates.worst_opponent == [1, 0]
