"""The measurements of a forced-choice cell, in numpy: type shares, P between two policies from
their type counts, worst cases, distances from a target, and intervals over runs and samples.

    pi = shares(counts)                                       # the measured type distribution
    est = estimate(lambda a, b: a @ P @ b, [[ca, cb]], seed)  # one run: mean and 95% interval
    est = estimate(fn, [[ca0, cb0], [ca1, cb1]], seed)        # two seeds' runs
    matched(est, predicted)                                   # within TOLERANCE of it
    P_hat, n = label_preferences(wins)                        # what a cell's labels say

P(π_a ≻ π_b) computed from the type counts is π̂_aᵀ P π̂_b, the exact expectation of judging
every pair of their samples by the population.  Intervals are percentile intervals of a
two-level bootstrap: the runs (one per seed) are drawn with replacement, then every drawn
policy's counts are resampled (multinomial: a parametric bootstrap over its samples).  With
one run they hold the sampling error of the measurement only; with several, the variance
between training runs too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

TOLERANCE = 0.05
"""A measured head-to-head matches its prediction when it lies within this of it (issue 27)."""

DRAWS = 2000
"""Resamples behind every interval."""


def shares(counts: Sequence[int]) -> np.ndarray:
    """The measured type distribution (raw shares; uniform when there are no samples)."""
    c = np.asarray(counts, dtype=np.float64)
    return c / c.sum() if c.sum() else np.full(len(c), 1.0 / len(c))


def estimate(
    fn: Callable[..., float], runs: Sequence[Sequence[Sequence[int]]], seed: int
) -> dict[str, float]:
    """The mean over ``runs`` of ``fn`` of each run's measured shares (one argument per count
    vector of the run), with a 95% interval over resampled runs and samples."""
    if not runs:
        raise ValueError("estimate needs at least one run")
    rng = np.random.default_rng(seed)

    def value(run: Sequence[Sequence[int]]) -> float:
        return float(fn(*(shares(c) for c in run)))

    point = float(np.mean([value(run) for run in runs]))
    draws = []
    for _ in range(DRAWS):
        # one run is not drawn: its draws stay those of the one-run bootstrap, seed for seed
        chosen = (
            runs if len(runs) == 1 else [runs[k] for k in rng.integers(len(runs), size=len(runs))]
        )
        resampled = [[rng.multinomial(int(np.sum(c)), shares(c)) for c in run] for run in chosen]
        draws.append(np.mean([value(run) for run in resampled]))
    low, high = np.percentile(draws, [2.5, 97.5])
    return {"mean": point, "low": float(low), "high": float(high)}


def worst(P: np.ndarray) -> Callable[[np.ndarray], float]:
    """π ↦ min_j Σ_i π(i)·P(i ≻ j)."""
    return lambda pi: float(np.min(pi @ P))


def total_variation(p: Sequence[float], q: Sequence[float]) -> float:
    return float(0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum())


def matched(measured: dict[str, float], predicted: float) -> bool:
    """Whether ``measured`` lies within :data:`TOLERANCE` of ``predicted``."""
    return abs(measured["mean"] - predicted) <= TOLERANCE


def label_preferences(wins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P̂, n) of a cell's labelled pairs: ``wins[i, j]`` counts the pairs in which type i was
    chosen over type j, n = wins + winsᵀ how often each pair of types was compared, and
    P̂(i ≻ j) = (wins_ij + ½) / (n_ij + 1): the labels' own frequencies, half a count added
    to each side so that none is 0 or 1 (P̂ + P̂ᵀ = 1; ½ where a pair was never compared)."""
    wins = np.asarray(wins, dtype=np.float64)
    n = wins + wins.T
    P = (wins + 0.5) / (n + 1.0)
    np.fill_diagonal(P, 0.5)
    return P, n
