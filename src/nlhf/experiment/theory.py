"""What theory predicts for a population run, from the files it stored: where the Borda and
Condorcet winners of each held-out prompt's completions part, and each policy's worst case.

    found = winners(P)                 # Winners(borda, condorcet, lottery_support)
    summary = agreement(games)         # counts over prompts
    rates = worst_cases(tournament)    # each policy's lowest P against any other entrant

The Bradley–Terry fit ranks by a Borda count (Siththaranjan et al. 2023), so RLHF plays the
Borda winner; the maximal lottery (the unregularized Nash equilibrium, τ → 0) plays the
Condorcet winner where one exists and mixes over the top cycle otherwise.  When the Borda
winner lies in the lottery's support, P(Nash ≻ RLHF) = ½ however strong the cycle (an
equilibrium is indifferent among its support); a cycle then shows only in the worst-case win
rate, min_j Σ_i π(i)·P(i ≻ j).  A head-to-head win needs the two winners to part, which needs
no cycle at all (issue 27; ``nlhf experiment decoy``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linprog

from nlhf.tabular import fit_bradley_terry

SUPPORT = 1e-6
"""A type is in the maximal lottery's support when the lottery gives it more than this."""


def maximal_lottery(P: np.ndarray) -> np.ndarray:
    """A maximal lottery of ``P``: p ≥ 0, Σp = 1 with pᵀ(P − ½) ≥ 0 (a linear program)."""
    k = P.shape[0]
    A = P - 0.5
    found = linprog(
        c=np.zeros(k),
        A_ub=-A.T,
        b_ub=np.zeros(k),
        A_eq=np.ones((1, k)),
        b_eq=[1.0],
        bounds=[(0, None)] * k,
        method="highs",
    )
    if not found.success:  # a skew-symmetric game always has one; rounding aside
        raise RuntimeError(f"no maximal lottery found: {found.message}")
    return np.asarray(found.x)


@dataclass(frozen=True)
class Winners:
    borda: int
    """The Bradley–Terry fit's argmax (every pair compared once): RLHF's pick."""
    condorcet: int | None
    """The item that beats every other by majority, if any."""
    in_support: bool
    """Whether the Borda winner lies in the maximal lottery's support."""


def winners(P: np.ndarray) -> Winners:
    """The Borda and Condorcet winners of ``P`` and whether the lottery plays the first."""
    borda = int(np.argmax(fit_bradley_terry(P)))
    beats = (P > 0.5) | np.eye(P.shape[0], dtype=bool)
    condorcet = next((i for i in range(P.shape[0]) if beats[i].all()), None)
    return Winners(borda, condorcet, bool(maximal_lottery(P)[borda] > SUPPORT))


def agreement(games: list[np.ndarray]) -> dict[str, int]:
    """Over the prompts' games: how many have a Condorcet winner, how many a Borda winner
    equal to it, and how many a Borda winner inside the maximal lottery's support."""
    found = [winners(P) for P in games]
    return {
        "prompts": len(found),
        "condorcet": sum(w.condorcet is not None for w in found),
        "coincide": sum(w.condorcet == w.borda for w in found),
        "borda_in_support": sum(w.in_support for w in found),
    }


def worst_cases(tournament: dict[str, Any], judge: str = "population") -> dict[str, Any]:
    """Each policy's lowest P(policy ≻ other) against any other entrant under ``judge``, with
    its interval and the entrant that attains it."""
    names = [p["name"] for p in tournament["policies"]]
    j = tournament["judges"][judge]
    out = {}
    for a, name in enumerate(names):
        b = min((b for b in range(len(names)) if b != a), key=lambda b: j["win_rate"][a][b])
        out[name] = {
            "mean": j["win_rate"][a][b],
            "low": j["low"][a][b],
            "high": j["high"][a][b],
            "against": names[b],
        }
    return out
