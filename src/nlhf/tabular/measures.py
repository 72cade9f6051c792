"""How good is a policy in a preference game: KL, win rates, exploitability.

All functions take a preference matrix ``P`` (``P[i, j] = P(i ≻ j)``) and probability vectors.
The regularized game is  f(π, π′) = P(π ≻ π′) − τ·KL(π‖μ) + τ·KL(π′‖μ),  whose unique
Nash equilibrium π* is symmetric and satisfies π* ∝ μ·exp(P π*/τ).
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


def kl(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p‖q) = Σ p log(p/q), with 0·log 0 = 0; p and q are probability vectors."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    support = p > 0
    return float(np.sum(p[support] * (np.log(p[support]) - np.log(q[support]))))


def kl_rows(p: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """KL(p‖Q[t]) for every row of a trajectory ``Q`` of shape (T, n); p strictly positive."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_ratio = np.log(p)[None, :] - np.log(np.asarray(Q, dtype=np.float64))
    return log_ratio @ p


def win_rate(P: np.ndarray, pi: np.ndarray, pi_prime: np.ndarray) -> float:
    """P(π ≻ π′) = πᵀ P π′: the probability a sample of π is preferred to one of π′."""
    return float(np.asarray(pi) @ np.asarray(P) @ np.asarray(pi_prime))


def exploitability(
    P: np.ndarray, pi: np.ndarray, mu: np.ndarray | None = None, tau: float = 0.0
) -> float:
    """How much a best-responding opponent gains against π, ≥ 0 and 0 only at the equilibrium.

    With ``tau = 0`` (the unregularized game): max_y P(y ≻ π) − ½.
    With ``tau > 0``: max_π′ [P(π′ ≻ π) − τ·KL(π′‖μ)] + τ·KL(π‖μ) − ½
                   = τ·log Σ_y μ(y)·exp(P(y ≻ π)/τ) + τ·KL(π‖μ) − ½.
    The duality gap of the symmetric profile (π, π) is twice this value.
    """
    P = np.asarray(P, dtype=np.float64)
    pi = np.asarray(pi, dtype=np.float64)
    scores = P @ pi
    if tau == 0:
        return float(scores.max() - 0.5)
    if mu is None:
        raise ValueError("the regularized exploitability needs the reference policy mu")
    mu = np.asarray(mu, dtype=np.float64)
    best = tau * float(logsumexp(scores / tau, b=mu))
    return max(best + tau * kl(pi, mu) - 0.5, 0.0)


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return float(0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum())
