"""The experiment's arithmetic, in numpy: majority cycles, restricted games, judge accuracy.

    P = antisymmetric(raw)                      # a K × K matrix of P(i ≻ j), exactly P + Pᵀ = 1
    cyclic, total = cyclic_triples(P)           # triples whose majority goes round in a circle
    game = restricted_game(P, tau=0.05)         # π*, π_RLHF and P(π* ≻ π_RLHF) on the K items
    shift = criterion_shift(game.nash, scores)  # E_π[s] − mean(s): what a policy favours

A triple {i, j, k} is *cyclic* (intransitive) when the majority, P > ½, prefers i to j, j to k
and k to i (either direction round); a tie (P = ½) breaks the cycle.  The restricted game takes
the uniform reference over the K completions: π* is its τ-regularized Nash equilibrium and
π_RLHF the KL-regularized optimum of the Bradley–Terry reward fitted to the same exact P.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from nlhf.metrics import wilson_interval
from nlhf.models.judges.population import population_preference
from nlhf.tabular import fit_bradley_terry, rlhf_policy, solve_regularized_nash

CLIP = 1e-9
"""P is kept inside [CLIP, 1 − CLIP]: a finite Bradley–Terry fit needs no certain preference."""


def antisymmetric(P: np.ndarray) -> np.ndarray:
    """``P`` made exactly antisymmetric, ½ on the diagonal, inside [CLIP, 1 − CLIP]."""
    P = np.asarray(P, dtype=np.float64)
    P = np.clip((P + 1.0 - P.T) / 2.0, CLIP, 1.0 - CLIP)
    np.fill_diagonal(P, 0.5)
    return P


def population_matrix(
    scores: np.ndarray, weights: np.ndarray, temperatures: np.ndarray
) -> np.ndarray:
    """The population's exact (K, K) P from each group's criterion scores (G, K):
    P[i, j] = Σ_g w_g σ((s_g(i) − s_g(j))/T_g) (:func:`population_preference`)."""
    s = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    return population_preference(s[:, :, None], s[:, None, :], weights, temperatures)


def _cyclic(P: np.ndarray, i: int, j: int, k: int) -> bool:
    a, b, c = P[i, j], P[j, k], P[k, i]
    return bool((a > 0.5 and b > 0.5 and c > 0.5) or (a < 0.5 and b < 0.5 and c < 0.5))


def cyclic_triples(P: np.ndarray) -> tuple[int, int]:
    """(cyclic triples, all triples) of the items of ``P`` under its majority."""
    n = P.shape[0]
    cyclic = sum(_cyclic(P, i, j, k) for i, j, k in combinations(range(n), 3))
    return cyclic, n * (n - 1) * (n - 2) // 6


def pairs_in_cycles(P: np.ndarray) -> set[tuple[int, int]]:
    """Every pair (i < j) that belongs to at least one cyclic triple."""
    found: set[tuple[int, int]] = set()
    for i, j, k in combinations(range(P.shape[0]), 3):
        if _cyclic(P, i, j, k):
            found |= {(i, j), (i, k), (j, k)}
    return found


@dataclass(frozen=True)
class RestrictedGame:
    """The prediction on one prompt's K completions (uniform reference μ)."""

    nash: np.ndarray
    """π*, the τ-regularized Nash equilibrium."""
    rlhf: np.ndarray
    """π_RLHF ∝ μ·exp(r/τ) for the Bradley–Terry fit r of P."""
    reward: np.ndarray
    nash_vs_rlhf: float
    """π*ᵀ P π_RLHF."""
    nash_vs_reference: float
    rlhf_vs_reference: float
    nash_kl: float
    """KL(π*‖μ)."""
    rlhf_kl: float
    nash_vs_rlhf_equal_kl: float
    """π*ᵀ P π′ for the RLHF policy π′ whose KL(π′‖μ) equals KL(π*‖μ) (its own τ′): the
    reward is in log-odds units, so at one τ the RLHF optimum is sharper than π*."""


def kl(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.sum(p * (np.log(np.maximum(p, 1e-300)) - np.log(q))))


def rlhf_at_kl(reward: np.ndarray, mu: np.ndarray, target: float) -> np.ndarray:
    """The policy μ·exp(r/τ′)/Z with KL(·‖μ) = ``target`` (bisection on log τ′)."""
    if target <= 1e-12 or np.ptp(reward) == 0:
        return mu
    low, high = -12.0, 12.0  # log τ′: KL falls as τ′ grows
    for _ in range(100):
        mid = (low + high) / 2
        if kl(rlhf_policy(reward, mu, math.exp(mid)), mu) > target:
            low = mid
        else:
            high = mid
    return rlhf_policy(reward, mu, math.exp((low + high) / 2))


def restricted_game(P: np.ndarray, tau: float) -> RestrictedGame:
    """Both routes' optima on the game ``P`` (made antisymmetric first) and how they compare."""
    P = antisymmetric(P)
    mu = np.full(P.shape[0], 1.0 / P.shape[0])
    nash = solve_regularized_nash(P, mu, tau)
    reward = fit_bradley_terry(P)
    rlhf = rlhf_policy(reward, mu, tau)
    matched = rlhf_at_kl(reward, mu, kl(nash, mu))
    return RestrictedGame(
        nash=nash,
        rlhf=rlhf,
        reward=reward,
        nash_vs_rlhf=float(nash @ P @ rlhf),
        nash_vs_reference=float(nash @ P @ mu),
        rlhf_vs_reference=float(rlhf @ P @ mu),
        nash_kl=kl(nash, mu),
        rlhf_kl=kl(rlhf, mu),
        nash_vs_rlhf_equal_kl=float(nash @ P @ matched),
    )


def criterion_shift(policy: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """E_π[s_g] − mean_k s_g(y_k) for each row g of ``scores`` (G, K): > 0 means π favours g."""
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    return scores @ policy - scores.mean(axis=1)


def bradley_terry_majority(P: np.ndarray) -> np.ndarray:
    """(K, K) booleans: where the Bradley–Terry fit of ``P`` says row ≻ column."""
    r = fit_bradley_terry(antisymmetric(P))
    return r[:, None] > r[None, :]


@dataclass(frozen=True)
class Accuracy:
    """Correct decisions out of ``n`` (ties count half), with a 95% Wilson interval."""

    correct: float
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.correct / self.n if self.n else float("nan")

    def as_dict(self) -> dict[str, float | int | None]:
        value = None if not self.n else self.value
        low, high = (None, None) if not self.n else (self.low, self.high)
        return {"accuracy": value, "n": self.n, "low": low, "high": high}


def accuracy(predicted: np.ndarray, truth: np.ndarray) -> Accuracy:
    """How often P(chosen ≻ rejected) > ½ in ``predicted`` agrees with ``truth`` (booleans:
    the first response is the better one); predictions of exactly ½ count half."""
    predicted, truth = np.asarray(predicted, dtype=np.float64), np.asarray(truth, dtype=bool)
    if predicted.shape != truth.shape:
        raise ValueError(f"{predicted.shape} predictions for {truth.shape} truths")
    if not len(truth):
        return Accuracy(0.0, 0, float("nan"), float("nan"))
    says = predicted > 0.5
    correct = float(np.sum((says == truth) & (predicted != 0.5)) + 0.5 * np.sum(predicted == 0.5))
    low, high = wilson_interval(correct, len(truth))
    return Accuracy(correct, len(truth), low, high)
