"""What theory predicts for a population run (:mod:`nlhf.experiment.theory`): Borda and
Condorcet winners and the maximal lottery on games worked by hand, and worst cases read from
a tournament."""

import numpy as np
import pytest

from nlhf.experiment.theory import agreement, maximal_lottery, winners, worst_cases
from nlhf.tabular.lottery import decoy_rankings, ranking_population

CYCLE = np.array([[0.5, 0.7, 0.3], [0.3, 0.5, 0.7], [0.7, 0.3, 0.5]])


def test_the_maximal_lottery_of_a_symmetric_cycle_is_uniform():
    np.testing.assert_allclose(maximal_lottery(CYCLE), 1 / 3, atol=1e-9)
    found = winners(CYCLE)
    assert found.condorcet is None and found.in_support  # every item is in the lottery


def test_jackpots_voters_part_the_borda_and_condorcet_winners():
    # w = 0.4 ranks A ≻ C ≻ B, the rest B ≻ A ≻ C; three options, each pair compared once
    P = ranking_population(*decoy_rankings(0.4), noise=0.05)[:3, :3]
    found = winners(P)
    assert found.condorcet == 1  # B beats A and C 0.59 : 0.41
    assert found.borda == 0 and not found.in_support  # RLHF's pick gets nothing from the lottery
    np.testing.assert_allclose(maximal_lottery(P), [0, 1, 0], atol=1e-9)
    order = np.array([[0.5, 0.8, 0.9], [0.2, 0.5, 0.7], [0.1, 0.3, 0.5]])
    assert agreement([P, order, CYCLE]) == {
        "prompts": 3, "condorcet": 2, "coincide": 1, "borda_in_support": 2
    }  # fmt: skip


def test_each_policys_worst_case_is_its_lowest_row_entry():
    tournament = {
        "policies": [{"name": n} for n in ("reference", "ppo", "nash")],
        "judges": {
            "population": {
                "win_rate": [[0.5, 0.4, 0.45], [0.6, 0.5, 0.3], [0.55, 0.7, 0.5]],
                "low": [[None, 0.3, 0.4], [0.5, None, 0.2], [0.5, 0.6, None]],
                "high": [[None, 0.5, 0.5], [0.7, None, 0.4], [0.6, 0.8, None]],
            }
        },
    }
    found = worst_cases(tournament)
    assert found["ppo"]["mean"] == pytest.approx(0.3) and found["ppo"]["against"] == "nash"
    assert found["nash"]["against"] == "reference" and found["nash"]["low"] == 0.5
    assert found["reference"]["mean"] == pytest.approx(0.4)
