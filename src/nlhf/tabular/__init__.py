"""The tabular NLHF lab: preference games solved exactly, and the dynamics that learn them.

    from nlhf.tabular import solve_regularized_nash, nash_md
    pi_star = solve_regularized_nash(P, mu, tau)        # (n,), the unique regularized NE
    traj = nash_md(P, mu, tau=tau, eta=eta, steps=T)    # (T + 1, n): π_0 … π_T

The general-preference family's exact updates (SPPO, INPO, ONPO, online IPO, EGPO, MMD,
magnet reset, …) are in :mod:`nlhf.tabular.family`; the decoy and cycle predictions of a
forced choice among completion types (RLHF's Borda pick against the maximal lottery) are in
:mod:`nlhf.tabular.lottery`; their convergence study is
:func:`nlhf.tabular.convergence.run_study`.  Command line: ``nlhf tabular --help``.
numpy and scipy only.
"""

from nlhf.tabular.dynamics import mixture_md, nash_ema, nash_md, nash_mp, omwu, theorem_schedule
from nlhf.tabular.family import (
    egpo,
    inpo,
    magnet_reset,
    mirror_prox,
    mmd,
    online_ipo,
    onpo,
    proximal_point,
    sampled_oracle,
    sppo,
)
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
from nlhf.tabular.lottery import predict, ranking_population, worst_case
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
    "egpo",
    "exploitability",
    "fit_bradley_terry",
    "inpo",
    "kl",
    "magnet_reset",
    "make_game",
    "mirror_prox",
    "mixture_md",
    "mmd",
    "nash_ema",
    "nash_md",
    "nash_mp",
    "omwu",
    "online_ipo",
    "onpo",
    "predict",
    "proximal_point",
    "random_intransitive",
    "ranking_population",
    "reference_policy",
    "rlhf_policy",
    "sampled_oracle",
    "solve_regularized_nash",
    "sppo",
    "theorem_schedule",
    "total_variation",
    "win_rate",
    "worst_case",
]
