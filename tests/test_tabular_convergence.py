"""The convergence study: its measures match measures.py, its fits recover known rates, its
verdicts can say no, and run_study writes every file."""

import json

import numpy as np
import pytest

from nlhf.tabular import convergence as C
from nlhf.tabular import cycle, exploitability, make_game, reference_policy


def test_duality_gap_is_twice_the_exploitability_of_every_row():
    game = make_game("random", 5, seed=4)
    mu = reference_policy(5, "random", seed=4)
    traj = np.random.default_rng(0).dirichlet(np.ones(5), size=6)
    for tau in (0.0, 0.3):
        expected = [2 * exploitability(game.P, pi, mu, tau) for pi in traj]
        np.testing.assert_allclose(C.duality_gap(game.P, traj, mu, tau), expected, atol=1e-14)


@pytest.mark.parametrize("name", ["random", "cycle", "condorcet"])
def test_the_unregularized_equilibrium_loses_to_no_action(name):
    P = make_game(name, 5, seed=0).P
    pi = C.solve_unregularized_nash(P)
    assert np.all(P @ pi <= 0.5 + 1e-9) and pi.sum() == pytest.approx(1.0)


def test_known_equilibria():
    np.testing.assert_allclose(C.solve_unregularized_nash(cycle(3)), np.full(3, 1 / 3), atol=1e-9)
    condorcet = make_game("condorcet").P
    np.testing.assert_allclose(C.solve_unregularized_nash(condorcet), [1, 0, 0], atol=1e-9)


def test_fits_recover_known_rates():
    t = np.arange(0, 5001, dtype=float)
    assert C.fit_power(3 * (t + 1) ** -0.5) == pytest.approx(-0.5, abs=0.01)
    assert C.fit_linear(2 * 0.9**t) == pytest.approx(0.9, abs=1e-9)  # stops at 1e-11
    assert np.isnan(C.fit_power(0.5**t))  # rounding level after 37 steps: no two decades


def test_verdicts_can_fail():
    t = np.arange(0, 2001, dtype=float)
    slow = (t + 1) ** -0.5
    assert C.judge(C.Claim("power", "", "", order=0.5), slow, 0.0)[1]
    assert not C.judge(C.Claim("power", "", "", order=1.0), slow, 0.0)[1]
    geometric = 0.95**t
    assert C.judge(C.Claim("linear", "", "", factor=0.96), geometric, 0.0)[1]
    assert not C.judge(C.Claim("linear", "", "", factor=0.9), geometric, 0.0)[1]
    assert not C.judge(C.Claim("converges", "", ""), slow, 0.0)[1]
    assert C.judge(C.Claim("cycles", "", ""), np.ones(100), 0.0)[1]
    assert not C.judge(C.Claim("cycles", "", ""), geometric, 0.0)[1]


def test_run_cases_on_the_cycle_game_confirms_the_claims_it_can_in_few_steps():
    info, rows = C.run_cases("cycle", 3, 2000, seed=0)
    verdicts = {row.case.key: row.holds for row in rows}
    assert all(verdicts[k] for k in ("mirror-prox", "egpo", "mmd", "omwu", "reset-mmd"))
    assert verdicts["self-play"]  # the last iterate spirals out on rock-paper-scissors
    np.testing.assert_allclose(info["nash_unregularized"], np.full(3, 1 / 3), atol=1e-9)


def test_run_study_writes_the_report_plots_and_summary(tmp_path):
    summary = C.run_study(tmp_path / "study", steps=200, seed=1, quick=True)
    names = {p.name for p in (tmp_path / "study").iterdir()}
    assert names == {
        "report.md",
        "summary.json",
        "noise_floor.png",
        *(f"rates_{name}.png" for name, _ in C.GAMES),
    }  # no temporary file left behind
    on_disk = json.loads(
        (tmp_path / "study" / "summary.json").read_text(),
        parse_constant=lambda c: pytest.fail(f"{c} in summary.json"),
    )
    assert on_disk["config"] == summary["config"] == {
        "steps": 200, "seed": 1, "quick": True, "tau": C.TAU, "eta": C.ETA,
    }  # fmt: skip
    assert len(on_disk["rows"]) == len(C.CASES) * len(C.GAMES)
    report = (tmp_path / "study" / "report.md").read_text()
    assert "| method | game | claim" in report and "## Sampled oracle" in report
