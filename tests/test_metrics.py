"""``nlhf.metrics``: the Wilson interval and the expected calibration error against values
worked out by hand."""

import math

import numpy as np
import pytest

from nlhf.metrics import Z95, expected_calibration_error, wilson_interval


def test_wilson_interval_at_one_half():
    # p = 5/10, z = 2: denom = 1 + z²/n = 1.4, centre = (p + z²/2n) / denom = 0.7 / 1.4 = 0.5,
    # half = z·√(p(1−p)/n + z²/4n²) / denom = 2·√(0.025 + 0.01) / 1.4 = √(0.035 / 0.49) = √(1/14)
    low, high = wilson_interval(5, 10, z=2.0)
    assert low == pytest.approx(0.5 - math.sqrt(1 / 14))
    assert high == pytest.approx(0.5 + math.sqrt(1 / 14))


def test_wilson_interval_with_fractional_successes():
    # 2.5 of 5 (ties counted as ½), z = 2: denom = 1.8, centre = (0.5 + 0.4) / 1.8 = 0.5,
    # half = 2·√(0.05 + 0.04) / 1.8 = 2·0.3 / 1.8 = 1/3
    low, high = wilson_interval(2.5, 5, z=2.0)
    assert (low, high) == (pytest.approx(1 / 6), pytest.approx(5 / 6))


def test_wilson_interval_at_the_edges():
    # 0 of 4, z = 2: denom = 2, centre = (0 + 0.5) / 2 = 0.25, half = 2·√(4/64) / 2 = 0.25
    assert wilson_interval(0, 4, z=2.0) == (pytest.approx(0.0), pytest.approx(0.5))
    # 4 of 4 mirrors it: centre 0.75, half 0.25
    assert wilson_interval(4, 4, z=2.0) == (pytest.approx(0.5), pytest.approx(1.0))
    assert wilson_interval(0, 0) == (0.0, 1.0)  # no trials: nothing known


def test_wilson_interval_narrows_with_the_level():
    # z95 ≈ 1.96 < 2: the 95% interval lies inside the z = 2 one, around the same centre
    low95, high95 = wilson_interval(5, 10)
    low2, high2 = wilson_interval(5, 10, z=2.0)
    assert Z95 < 2.0 and low2 < low95 < 0.5 < high95 < high2
    assert low95 + high95 == pytest.approx(1.0)


def test_expected_calibration_error_by_hand():
    # 10 bins: 0.15 → bin 1, 0.32 and 0.38 → bin 3, 0.92 → bin 9
    # bin 1: |0.15 − 0| = 0.15 (1 of 4); bin 3: |0.35 − 0.5| = 0.15 (2 of 4);
    # bin 9: |0.92 − 1| = 0.08 (1 of 4); ECE = (0.15 + 2·0.15 + 0.08) / 4 = 0.1325
    p = np.array([0.15, 0.32, 0.38, 0.92])
    y = np.array([0, 1, 0, 1])
    assert expected_calibration_error(p, y) == pytest.approx(0.1325)


def test_expected_calibration_error_with_two_bins():
    # bin [0, ½): mean p 0.3, frequency 0.5 → 0.2 × 2 rows; bin [½, 1]: 0.7 vs 1 → 0.3 × 2 rows
    # ECE = (0.4 + 0.6) / 4 = 0.25
    p = np.array([0.2, 0.4, 0.6, 0.8])
    y = np.array([0, 1, 1, 1])
    assert expected_calibration_error(p, y, bins=2) == pytest.approx(0.25)


def test_expected_calibration_error_is_zero_when_calibrated_and_checks_shapes():
    # p = 1 falls into the last bin, p = 0 into the first; both match their outcomes
    assert expected_calibration_error(np.array([1.0, 0.0]), np.array([1, 0])) == 0.0
    with pytest.raises(ValueError, match="same length"):
        expected_calibration_error(np.array([0.5, 0.5]), np.array([1]))
