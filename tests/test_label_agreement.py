"""Cohen's and Fleiss' kappa against textbook examples and basic properties."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nlhf.label.agreement import (
    cohen_kappa,
    cohen_kappa_from_table,
    fleiss_kappa,
    observed_agreement,
)

# Fleiss (1971) as worked on Wikipedia's "Fleiss' kappa" page: 10 subjects, 14 raters each,
# 5 categories; P̄ = 0.378, P̄e = 0.213, κ = 0.210.
FLEISS_EXAMPLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]


def test_fleiss_textbook_example():
    assert observed_agreement(FLEISS_EXAMPLE) == pytest.approx(0.378, abs=5e-4)
    assert fleiss_kappa(FLEISS_EXAMPLE) == pytest.approx(0.210, abs=5e-4)


def test_cohen_textbook_examples():
    # Wikipedia "Cohen's kappa": 50 grant proposals, yes/yes 20, yes/no 5, no/yes 10, no/no 15.
    assert cohen_kappa_from_table([[20, 5], [10, 15]]) == pytest.approx(0.4)
    # Same page, "same agreement, different kappa": 0.1304 and 0.2593.
    assert cohen_kappa_from_table([[45, 15], [25, 15]]) == pytest.approx(0.1304, abs=1e-4)
    assert cohen_kappa_from_table([[25, 35], [5, 35]]) == pytest.approx(0.2593, abs=1e-4)


def test_cohen_from_labels_matches_table():
    first = ["y"] * 25 + ["n"] * 25
    second = ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15
    assert cohen_kappa(first, second) == pytest.approx(0.4)


def test_perfect_and_chance_and_undefined():
    assert cohen_kappa(["a", "b", "tie", "a"], ["a", "b", "tie", "a"]) == pytest.approx(1.0)
    assert cohen_kappa_from_table([[10, 10], [10, 10]]) == pytest.approx(0.0)
    assert math.isnan(cohen_kappa(["a", "a"], ["a", "a"]))
    assert math.isnan(fleiss_kappa([[3, 0], [2, 0]]))
    assert fleiss_kappa([[3, 0], [0, 3]]) == pytest.approx(1.0)


def test_fleiss_with_unequal_rater_counts_reduces_to_per_item_average():
    counts = [[2, 0, 0], [1, 1, 1], [0, 4, 0]]
    p_items = [1.0, 0.0, 1.0]
    p_j = np.array([3, 5, 1]) / 9
    expected = (np.mean(p_items) - (p_j**2).sum()) / (1 - (p_j**2).sum())
    assert fleiss_kappa(counts) == pytest.approx(expected)


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="fewer than 2"):
        fleiss_kappa([[1, 0], [2, 0]])
    with pytest.raises(ValueError, match="square"):
        cohen_kappa_from_table([[1, 2, 3]])
    with pytest.raises(ValueError, match="equal"):
        cohen_kappa(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="empty"):
        cohen_kappa_from_table([[0, 0], [0, 0]])
    with pytest.raises(ValueError, match="not in"):
        cohen_kappa(["a"], ["c"], categories=["a", "b"])


@given(st.lists(st.tuples(st.sampled_from("abt"), st.sampled_from("abt")), min_size=2))
def test_cohen_is_symmetric_and_at_most_one(pairs):
    first, second = zip(*pairs, strict=True)
    k1 = cohen_kappa(first, second, "abt")
    k2 = cohen_kappa(second, first, "abt")
    assert (math.isnan(k1) and math.isnan(k2)) or k1 == pytest.approx(k2)
    assert math.isnan(k1) or k1 <= 1 + 1e-12


@given(st.lists(st.lists(st.integers(0, 5), min_size=3, max_size=3), min_size=1, max_size=20))
def test_fleiss_is_at_most_one(rows):
    rows = [r for r in rows if sum(r) >= 2]
    if not rows:
        return
    kappa = fleiss_kappa(rows)
    assert math.isnan(kappa) or kappa <= 1 + 1e-12
