"""Statistics for judgements and win rates: intervals and calibration (pure numpy).

from nlhf.metrics import wilson_interval, expected_calibration_error
low, high = wilson_interval(successes=71, trials=100)        # 95% by default
ece = expected_calibration_error(probabilities, outcomes)
"""

from __future__ import annotations

import numpy as np

Z95 = 1.959963984540054


def wilson_interval(successes: float, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (accepts fractional successes, e.g. ties
    counted as ½); (0, 1) when there are no trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z**2 / trials
    centre = (p + z**2 / (2 * trials)) / denom
    half = z * np.sqrt(p * (1 - p) / trials + z**2 / (4 * trials**2)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def expected_calibration_error(
    probabilities: np.ndarray, outcomes: np.ndarray, bins: int = 10
) -> float:
    """Σ_bins (n_b / n)·|mean predicted − observed frequency| over equal-width bins of [0, 1]."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(outcomes, dtype=np.float64)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError(f"need two 1-d arrays of the same length, got {p.shape} and {y.shape}")
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        in_bin = which == b
        if in_bin.any():
            total += in_bin.sum() * abs(p[in_bin].mean() - y[in_bin].mean())
    return float(total / len(p))


def log_loss(probabilities: np.ndarray, outcomes: np.ndarray, eps: float = 1e-12) -> float:
    p = np.clip(np.asarray(probabilities, dtype=np.float64), eps, 1 - eps)
    y = np.asarray(outcomes, dtype=np.float64)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
