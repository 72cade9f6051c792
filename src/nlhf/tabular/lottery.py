"""Predictions for a forced choice among K completion types: RLHF's Borda pick against the
maximal lottery (the Nash equilibrium), exactly, before anything trains.

    P = ranking_population(decoy_rankings(0.4), noise=0.05)      # (4, 4) P(i ≻ j)
    q = pair_distribution(0.3, other=0.1)                         # types of the judges' pairs
    cell = predict(P, mu, q, tau=0.05)                            # β paired to τ by equal KL
    cell.nash_vs_rlhf, cell.worst_case_rlhf, cell.worst_case_nash

Types are indices; the decoy and cycle populations order them (A, B, C, other): A the Borda
pick, B the Condorcet winner, C the decoy, ``other`` every answer that names no single option
(ranked last by every annotator).  An annotator type is a ranking; it prefers i to j with
probability 1 − ``noise`` when it ranks i above j, so no P is 0 or 1 and the Bradley–Terry fit
is finite.  RLHF's target is π ∝ μ·exp(r/β) for the Bradley–Terry fit r on the pairs as drawn
(weights q qᵀ: Siththaranjan et al. 2023, a Borda count weighted by how often each type is
compared); NLHF's is the τ-regularized Nash equilibrium π*_τ.  P(Nash ≻ RLHF) = ½ + π*ᵀAπ_RL
(A = P − ½); a policy's worst case is min_j Σ_i π(i)·P(i ≻ j).  numpy and scipy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from nlhf.tabular.measures import kl
from nlhf.tabular.rlhf import fit_bradley_terry, rlhf_policy
from nlhf.tabular.solver import solve_regularized_nash

Ranking = Sequence[int]
"""One annotator type: the type indices, best first."""


def ranking_population(
    rankings: Sequence[Ranking], shares: Sequence[float], noise: float, k: int | None = None
) -> np.ndarray:
    """The population's exact (K, K) P: Σ_g share_g · P_g, where P_g(i ≻ j) is 1 − ``noise``
    when ranking g puts i above j and ``noise`` otherwise (½ on the diagonal)."""
    shares = np.asarray(shares, dtype=np.float64)
    if len(shares) != len(rankings) or np.any(shares < 0) or not math.isclose(shares.sum(), 1):
        raise ValueError(f"shares must be one weight ≥ 0 per ranking, summing to 1: {shares}")
    if not 0.0 < noise < 0.5:
        raise ValueError(f"noise must lie in (0, ½) so that no P is 0 or 1, got {noise}")
    k = k if k is not None else len(rankings[0])
    P = np.zeros((k, k))
    for ranking, share in zip(rankings, shares, strict=True):
        if sorted(ranking) != list(range(k)):
            raise ValueError(f"a ranking must order all {k} types once, got {list(ranking)}")
        place = np.argsort(ranking)  # place[i]: the position of type i
        above = place[:, None] < place[None, :]
        P += share * np.where(above, 1.0 - noise, noise)
    np.fill_diagonal(P, 0.5)
    return P


def decoy_rankings(w: float) -> tuple[list[Ranking], list[float]]:
    """Jackpot's voters over (A, B, C, other): a share ``w`` ranks A ≻ C ≻ B, the rest
    B ≻ A ≻ C; everyone ranks ``other`` last.  B is the Condorcet winner for w < ½."""
    if not 0.0 < w < 1.0:
        raise ValueError(f"w must lie in (0, 1), got {w}")
    return [(0, 2, 1, 3), (1, 0, 2, 3)], [w, 1.0 - w]


def cycle_rankings(strength: float) -> tuple[list[Ranking], list[float]]:
    """Three annotator types, each a rotation of 0 ≻ 1 ≻ 2, in equal shares of 1 − λ, and a
    transitive quality 0 ≻ 1 ≻ 2 of share λ = ``strength``; ``other`` last.  The majority
    cycles (P(2 ≻ 0) > ½) while λ < :data:`CYCLE_OVERTURN`."""
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"the quality's share must lie in [0, 1], got {strength}")
    rotations = [(0, 1, 2, 3), (1, 2, 0, 3), (2, 0, 1, 3)]
    return [*rotations, (0, 1, 2, 3)], [*[(1.0 - strength) / 3] * 3, strength]


CYCLE_OVERTURN = 0.25
"""The quality share λ above which 0 beats 2 by majority and the cycle is overturned:
P(2 ≻ 0) − ½ = (1 − 2ε)·((1 − λ)·⅔ − ½), zero at λ = ¼ whatever the noise ε."""


def pair_distribution(decoy: float | None, other: float) -> np.ndarray:
    """The types of the completions the judges' pairs are drawn from, over (A, B, C, other):
    ``other`` for answers that name no single option, the rest split as C = ``decoy`` and A, B
    half of what is left each (``decoy`` None: the three options equally)."""
    if not 0.0 <= other < 1.0:
        raise ValueError(f"the share of other answers must lie in [0, 1), got {other}")
    if decoy is None:
        decoy = 1.0 / 3.0
    if not 0.0 <= decoy < 1.0:
        raise ValueError(f"the decoy share must lie in [0, 1), got {decoy}")
    side = (1.0 - decoy) / 2.0
    return np.array([side, side, decoy, 0.0]) * (1.0 - other) + np.array([0, 0, 0, other])


def head_to_head(P: np.ndarray, pi: np.ndarray, pi_prime: np.ndarray) -> float:
    """P(π ≻ π′) = ½ + πᵀ(P − ½)π′ = πᵀPπ′."""
    return float(np.asarray(pi) @ P @ np.asarray(pi_prime))


def worst_case(P: np.ndarray, pi: np.ndarray) -> tuple[float, int]:
    """(min_j Σ_i π(i)·P(i ≻ j), the j that attains it): the lowest win rate of π against any
    policy (a linear function of the opponent, so a pure type attains it)."""
    rates = np.asarray(pi) @ P
    j = int(np.argmin(rates))
    return float(rates[j]), j


def matched_beta(reward: np.ndarray, mu: np.ndarray, target: float) -> float:
    """The β whose RLHF target μ·exp(r/β)/Z lies at KL ``target`` from μ (bisection on log β;
    the KL falls as β grows).  Clamped to [1e-4, 1e4] where the target is out of reach."""
    low, high = math.log(1e-4), math.log(1e4)
    for _ in range(200):
        mid = (low + high) / 2
        if kl(rlhf_policy(reward, mu, math.exp(mid)), mu) > target:
            low = mid
        else:
            high = mid
    return math.exp((low + high) / 2)


@dataclass(frozen=True)
class Prediction:
    """Both routes' targets on one cell and how they compare, in the population's P."""

    tau: float
    beta: float
    reward: list[float]
    """The Bradley–Terry fit on the pairs as drawn (mean zero)."""
    rlhf: list[float]
    nash: list[float]
    nash_vs_rlhf: float
    worst_case_rlhf: float
    worst_case_nash: float
    kl_rlhf: float
    kl_nash: float

    def as_dict(self) -> dict:
        return asdict(self)


def predict(
    P: np.ndarray, mu: np.ndarray, pairs: np.ndarray, tau: float, beta: float | None = None
) -> Prediction:
    """The cell's prediction: the Bradley–Terry fit with pair weights ``pairs``·``pairs``ᵀ,
    π_RL ∝ μ·exp(r/β), π*_τ, the head-to-head and each worst case.  ``beta`` None: the β at
    which KL(π_RL‖μ) equals KL(π*_τ‖μ) (the pairing by equal KL of the type distribution)."""
    P, mu, pairs = (np.asarray(x, dtype=np.float64) for x in (P, mu, pairs))
    reward = fit_bradley_terry(P, pair_weights=np.outer(pairs, pairs))
    nash = solve_regularized_nash(P, mu, tau)
    if beta is None:
        beta = matched_beta(reward, mu, kl(nash, mu))
    rlhf = rlhf_policy(reward, mu, beta)
    return Prediction(
        tau=float(tau),
        beta=float(beta),
        reward=reward.tolist(),
        rlhf=rlhf.tolist(),
        nash=nash.tolist(),
        nash_vs_rlhf=head_to_head(P, nash, rlhf),
        worst_case_rlhf=worst_case(P, rlhf)[0],
        worst_case_nash=worst_case(P, nash)[0],
        kl_rlhf=kl(rlhf, mu),
        kl_nash=kl(nash, mu),
    )


def smoothed_shares(counts: Sequence[int]) -> np.ndarray:
    """A type distribution from counts with half a count added to each type (Jeffreys), so
    a type the sample missed keeps a small positive share (the solvers need μ > 0)."""
    c = np.asarray(counts, dtype=np.float64) + 0.5
    return c / c.sum()
