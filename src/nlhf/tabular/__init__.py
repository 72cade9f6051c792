"""The tabular NLHF lab: preference games solved exactly, and the dynamics that learn them.

    from nlhf.tabular import solve_regularized_nash, nash_md
    pi_star = solve_regularized_nash(P, mu, tau)        # (n,), the unique regularized NE
    traj = nash_md(P, mu, tau=tau, eta=eta, steps=T)    # (T + 1, n): π_0 … π_T

Command line: ``nlhf tabular --help``.  numpy and scipy only.
"""

from nlhf.tabular.dynamics import mixture_md, nash_ema, nash_md, nash_mp, omwu, theorem_schedule
from nlhf.tabular.games import (
    GAMES,
    Game,
    bradley_terry,
    condorcet,
    cycle,
    cycle_with_dominated,
    make_game,
    random_intransitive,
    reference_policy,
)
from nlhf.tabular.measures import exploitability, kl, total_variation, win_rate
from nlhf.tabular.rlhf import fit_bradley_terry, rlhf_policy
from nlhf.tabular.solver import solve_regularized_nash

__all__ = [
    "GAMES",
    "Game",
    "bradley_terry",
    "condorcet",
    "cycle",
    "cycle_with_dominated",
    "exploitability",
    "fit_bradley_terry",
    "kl",
    "make_game",
    "mixture_md",
    "nash_ema",
    "nash_md",
    "nash_mp",
    "omwu",
    "random_intransitive",
    "reference_policy",
    "rlhf_policy",
    "solve_regularized_nash",
    "theorem_schedule",
    "total_variation",
    "win_rate",
]
