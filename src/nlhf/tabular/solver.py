"""The exact regularized Nash equilibrium of a preference game.

    from nlhf.tabular import solve_regularized_nash
    pi_star = solve_regularized_nash(P, mu, tau)

The game  max_π min_π′  P(π ≻ π′) − τ·KL(π‖μ) + τ·KL(π′‖μ)  has a unique equilibrium,
symmetric, and characterized by the fixed point  π* = softmax(log μ + P π*/τ).

We solve that fixed point in logit space, F(z) = z − log μ − P·softmax(z)/τ = 0, by Newton's
method with a backtracking line search on ½‖F‖².  The Jacobian I − A·S/τ (A = P − ½ is
skew-symmetric, S = diag(s) − s sᵀ is positive semi-definite) has eigenvalues 1 − iλ with λ
real, so it is never singular: every stationary point of ½‖F‖² is the solution, the search
cannot stall, and the last iterations converge quadratically to machine precision.
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax

from nlhf.tabular.validation import check_policy, check_preference_matrix, check_tau


def solve_regularized_nash(
    P: np.ndarray, mu: np.ndarray, tau: float, *, tol: float = 1e-14, max_iter: int = 200
) -> np.ndarray:
    """The unique Nash equilibrium π* of the τ-regularized game, accurate to ~1e-13.

    Args:
        P: (n, n) preference matrix, P[i, j] = P(i ≻ j), P + Pᵀ = 1.
        mu: (n,) strictly positive reference policy.
        tau: regularization strength τ > 0.
        tol: stop when max |z − log μ − P π/τ| ≤ tol·(1 + max|z|).
        max_iter: Newton iterations before giving up with a RuntimeError.
    """
    P = check_preference_matrix(P)
    mu = check_policy(mu, P.shape[0])
    tau = check_tau(tau)
    log_mu = np.log(mu)
    s = mu
    # Newton from the logits of the best response to μ; if that fails (very small τ, where
    # the logits span hundreds of nats), follow the solution down from τ = 1 (continuation).
    stages = [(tau, min(max_iter, 30))] + [(t, max_iter) for t in _continuation(tau)]
    for stage_tau, iterations in stages:
        z0 = log_mu + (P @ s) / stage_tau
        s, residual = _newton(P, log_mu, stage_tau, z0, tol, iterations)
        if stage_tau == tau and residual <= tol:
            return s
    if residual <= 100 * tol:  # Newton stalled at rounding level: still far below 1e-10
        return s
    raise RuntimeError(
        f"regularized Nash solver did not converge (residual {residual:.3g}); "
        f"try a larger tau (got {tau})"
    )


def _continuation(tau: float, ratio: float = 0.25) -> list[float]:
    """A decreasing schedule 1, ¼, … ending exactly at ``tau``."""
    if tau >= 1:
        return []
    taus = [1.0]
    while taus[-1] * ratio > tau:
        taus.append(taus[-1] * ratio)
    return [*taus, tau]


def _newton(
    P: np.ndarray, log_mu: np.ndarray, tau: float, z: np.ndarray, tol: float, max_iter: int
) -> tuple[np.ndarray, float]:
    """Damped Newton on F(z) = z − log μ − P softmax(z)/τ; returns (softmax(z), scaled residual)."""
    eye = np.eye(len(z))

    def residual(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = softmax(z)
        return z - log_mu - (P @ s) / tau, s

    def scaled(F: np.ndarray, z: np.ndarray) -> float:
        return float(np.max(np.abs(F)) / (1.0 + np.max(np.abs(z))))

    F, s = residual(z)
    merit = float(F @ F)
    for _ in range(max_iter):
        if scaled(F, z) <= tol:
            break
        J = eye - (P @ (np.diag(s) - np.outer(s, s))) / tau
        step = np.linalg.solve(J, -F)
        t = 1.0
        while True:
            F_new, s_new = residual(z + t * step)
            merit_new = float(F_new @ F_new)
            # Armijo condition for ½‖F‖² along the Newton direction (its slope is −‖F‖²).
            if merit_new <= (1.0 - 1e-4 * t) * merit or t < 1e-10:
                break
            t *= 0.5
        if merit_new >= merit:
            break  # no progress possible at machine precision
        z, F, s, merit = z + t * step, F_new, s_new, merit_new
    return s, scaled(F, z)
