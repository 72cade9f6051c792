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
from scipy.special import softmax

from nlhf.tabular.games import sigmoid
from nlhf.tabular.validation import check_policy, check_preference_matrix, check_tau


def fit_bradley_terry(P: np.ndarray, pair_weights: np.ndarray | None = None, *,
                      tol: float = 1e-12, max_iter: int = 100) -> np.ndarray:
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
    r = np.zeros(n)
    centering = np.ones((n, n)) / n

    def objective(r: np.ndarray) -> float:
        d = r[:, None] - r[None, :]
        # log σ(d) = −log(1 + e^{−d}), written stably.
        return float(np.sum(W * P * -np.logaddexp(0.0, -d)))

    value = objective(r)
    for _ in range(max_iter):
        s = sigmoid(r[:, None] - r[None, :])
        grad = -np.sum(W * (s - P), axis=1)  # ∂/∂r_k of the log-likelihood (per unordered pair ×2)
        if np.max(np.abs(grad)) <= tol * max(1.0, np.abs(W).sum() / n):
            break
        curvature = W * s * (1.0 - s)
        laplacian = np.diag(curvature.sum(axis=1)) - curvature
        step = np.linalg.solve(laplacian + centering, grad)
        t = 1.0
        while t > 1e-12:
            candidate = r + t * step
            new_value = objective(candidate)
            if new_value >= value + 1e-4 * t * float(grad @ step):
                break
            t *= 0.5
        if new_value < value:
            break
        r, value = candidate - candidate.mean(), new_value
    else:
        raise RuntimeError(
            "Bradley–Terry fit did not converge: the preferences may separate the actions "
            "perfectly (some P entries exactly 0 or 1 along a consistent order), which sends "
            "the maximum-likelihood reward to infinity"
        )
    return r - r.mean()


def rlhf_policy(reward: np.ndarray, mu: np.ndarray, tau: float) -> np.ndarray:
    """The KL-regularized optimum π ∝ μ·exp(r/τ)."""
    reward = np.asarray(reward, dtype=np.float64)
    mu = check_policy(mu, reward.shape[0])
    return softmax(np.log(mu) + reward / check_tau(tau))
