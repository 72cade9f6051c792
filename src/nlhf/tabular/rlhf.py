"""The RLHF route on a preference game: fit a Bradley–Terry reward, then its KL-regularized optimum.

    from nlhf.tabular.rlhf import fit_bradley_terry, rlhf_policy
    r = fit_bradley_terry(P)                 # maximum likelihood over all ordered pairs
    pi = rlhf_policy(r, mu, tau)             # argmax_π E_π[r] − τ·KL(π‖μ) = μ·exp(r/τ)/Z

When P is Bradley–Terry-consistent the fit recovers the scores exactly (up to a constant).
When it is not (cycles, populations with different rankings) the fit is the best scalar
summary, and its optimum can be a policy that a majority prefers against: see
:func:`nlhf.tabular.games.condorcet`.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse.csgraph import connected_components
from scipy.special import softmax

from nlhf.tabular.games import sigmoid
from nlhf.tabular.validation import check_policy, check_preference_matrix, check_tau


def fit_bradley_terry(
    P: np.ndarray,
    pair_weights: np.ndarray | None = None,
    *,
    tol: float = 1e-12,
    max_iter: int = 100,
) -> np.ndarray:
    """Maximum-likelihood Bradley–Terry reward r (mean zero) for preference probabilities P.

    Maximizes Σ_{i≠j} w_ij · P_ij · log σ(r_i − r_j) by Newton's method (the objective is
    concave; its Hessian is a graph Laplacian, made definite by fixing mean(r) = 0).
    ``pair_weights`` (symmetric, default all ones) says how often each pair is compared,
    e.g. ``np.outer(mu, mu)`` for pairs sampled from a policy μ.
    """
    P = check_preference_matrix(P)
    n = P.shape[0]
    W = np.ones((n, n)) if pair_weights is None else np.asarray(pair_weights, dtype=np.float64)
    if W.shape != P.shape or np.any(W < 0) or not np.allclose(W, W.T):
        raise ValueError("pair_weights must be a non-negative symmetric matrix shaped like P")
    W = W * (1.0 - np.eye(n))
    _check_estimable(P, W)
    r = np.zeros(n)
    centering = np.ones((n, n)) / n

    def objective(r: np.ndarray) -> float:
        d = r[:, None] - r[None, :]
        # log σ(d) = −log(1 + e^{−d}), written stably.
        return float(np.sum(W * P * -np.logaddexp(0.0, -d)))

    value = objective(r)
    scale = max(1.0, W.sum() / n)
    converged = False
    for _ in range(max_iter):
        s = sigmoid(r[:, None] - r[None, :])
        grad = -np.sum(W * (s - P), axis=1)  # gradient of the log-likelihood
        if np.max(np.abs(grad)) <= tol * scale:
            converged = True
            break
        curvature = W * s * (1.0 - s)
        laplacian = np.diag(curvature.sum(axis=1)) - curvature
        step = np.linalg.solve(laplacian + centering, grad)
        if np.max(np.abs(step)) <= 1e-12 * (1.0 + np.max(np.abs(r))):
            converged = True
            break
        decrement = float(grad @ step)  # Newton decrement λ², ≥ 0
        t, improved = 1.0, False
        while t > 1e-12:
            candidate = r + t * step
            new_value = objective(candidate)
            # Near the optimum the full step is right and the objective cannot resolve the gain.
            if decrement < 1e-8 or new_value >= value + 1e-4 * t * decrement:
                improved = True
                break
            t *= 0.5
        if not improved:  # at the optimum to rounding precision
            converged = np.max(np.abs(grad)) <= 1e-6 * scale
            break
        r, value = candidate - candidate.mean(), new_value
    if not converged:
        raise RuntimeError(f"Bradley–Terry fit did not converge in {max_iter} Newton steps")
    return r - r.mean()


def _check_estimable(P: np.ndarray, W: np.ndarray) -> None:
    """The maximum-likelihood reward is finite iff every action beats every other through some
    chain of compared pairs (the "beats" graph is strongly connected); otherwise it diverges."""
    beats = (W * P) > 0
    count, labels = connected_components(beats, directed=True, connection="strong")
    if count > 1:
        groups = [np.flatnonzero(labels == k).tolist() for k in range(count)]
        raise ValueError(
            "the Bradley–Terry reward is infinite for these preferences: the actions split into "
            f"groups {groups} where some group never beats another (P entries of exactly 0 or 1 "
            "along a consistent order); add label noise or comparisons between the groups"
        )


def rlhf_policy(reward: np.ndarray, mu: np.ndarray, tau: float) -> np.ndarray:
    """The KL-regularized optimum π ∝ μ·exp(r/τ)."""
    reward = np.asarray(reward, dtype=np.float64)
    mu = check_policy(mu, reward.shape[0])
    return softmax(np.log(mu) + reward / check_tau(tau))
