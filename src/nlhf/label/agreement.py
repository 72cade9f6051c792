"""Agreement between labelers: Cohen's kappa for two raters, Fleiss' kappa for many.

Pure functions on counts, no I/O.  A kappa compares the observed agreement p_o with the
agreement p_e expected by chance from the raters' category frequencies:
κ = (p_o − p_e) / (1 − p_e); 1 is perfect agreement, 0 chance level, < 0 worse than chance.
When chance agreement is already perfect (everyone used one category) κ is undefined: NaN.

    from nlhf.label.agreement import cohen_kappa, fleiss_kappa
    cohen_kappa(["a", "b", "a"], ["a", "b", "b"])          # two raters, same items
    fleiss_kappa([[0, 3], [2, 1], [3, 0]])                  # items × categories vote counts

Fleiss' kappa (Fleiss 1971) assumes every item has the same number of ratings; here items
may have different numbers (each at least 2): the per-item agreement P_i is averaged over
items and the category shares p_j are pooled over all ratings, which is Fleiss' formula
exactly when the numbers are equal.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np


def cohen_kappa_from_table(table: Sequence[Sequence[float]] | np.ndarray) -> float:
    """Cohen's κ from a square contingency table: ``table[i][j]`` items rated i by the first
    rater and j by the second."""
    t = np.asarray(table, dtype=float)
    if t.ndim != 2 or t.shape[0] != t.shape[1]:
        raise ValueError(f"expected a square table, got shape {t.shape}")
    if (t < 0).any():
        raise ValueError("a contingency table cannot hold negative counts")
    total = t.sum()
    if total <= 0:
        raise ValueError("the table is empty: no item rated by both raters")
    p_o = np.trace(t) / total
    p_e = float(t.sum(axis=1) @ t.sum(axis=0)) / total**2
    if math.isclose(p_e, 1.0):
        return math.nan
    return float((p_o - p_e) / (1.0 - p_e))


def cohen_kappa(
    first: Sequence[Hashable],
    second: Sequence[Hashable],
    categories: Sequence[Hashable] | None = None,
) -> float:
    """Cohen's κ of two raters' labels for the same items, in the same order."""
    if len(first) != len(second):
        raise ValueError(f"the raters labelled {len(first)} and {len(second)} items; need equal")
    cats = list(categories) if categories is not None else sorted(set(first) | set(second), key=str)
    index = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(cats), len(cats)))
    for x, y in zip(first, second, strict=True):
        if x not in index or y not in index:
            raise ValueError(f"label {x if x not in index else y!r} is not in {cats}")
        table[index[x], index[y]] += 1
    return cohen_kappa_from_table(table)


def observed_agreement(counts: Sequence[Sequence[float]] | np.ndarray) -> float:
    """Mean over items of the share of rater pairs that agree (Fleiss' P̄)."""
    n_ij = _check_counts(counts)
    n_i = n_ij.sum(axis=1)
    return float(np.mean(((n_ij * (n_ij - 1)).sum(axis=1)) / (n_i * (n_i - 1))))


def fleiss_kappa(counts: Sequence[Sequence[float]] | np.ndarray) -> float:
    """Fleiss' κ from ``counts[i][j]``: how many raters put item i in category j."""
    n_ij = _check_counts(counts)
    p_bar = observed_agreement(n_ij)
    p_j = n_ij.sum(axis=0) / n_ij.sum()
    p_e = float((p_j**2).sum())
    if math.isclose(p_e, 1.0):
        return math.nan
    return float((p_bar - p_e) / (1.0 - p_e))


def _check_counts(counts: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    n_ij = np.asarray(counts, dtype=float)
    if n_ij.ndim != 2 or n_ij.shape[0] == 0 or n_ij.shape[1] == 0:
        raise ValueError(f"expected an items × categories matrix, got shape {n_ij.shape}")
    if (n_ij < 0).any():
        raise ValueError("vote counts cannot be negative")
    few = np.flatnonzero(n_ij.sum(axis=1) < 2)
    if few.size:
        raise ValueError(f"item {int(few[0])} has fewer than 2 ratings; agreement needs 2+")
    return n_ij
