"""Input checks for the tabular lab: a ValueError that says which check failed and by how much.

A preference game is a square matrix ``P`` with ``P[i, j] = P(action i ≻ action j)``, entries in
[0, 1] and ``P + Pᵀ = 1``; a policy is a strictly positive probability vector.
"""

from __future__ import annotations

import numpy as np

ATOL = 1e-9


def check_preference_matrix(P: np.ndarray, atol: float = ATOL) -> np.ndarray:
    """Return ``P`` as a float64 array, or raise ValueError naming the first violation."""
    P = np.asarray(P, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] != P.shape[1]:
        raise ValueError(f"P must be a square matrix, got shape {P.shape}")
    if P.shape[0] < 2:
        raise ValueError(f"P must have at least 2 actions, got {P.shape[0]}")
    if not np.all(np.isfinite(P)):
        i, j = np.argwhere(~np.isfinite(P))[0]
        raise ValueError(f"P[{i}, {j}] = {P[i, j]} is not finite")
    low, high = P.min(), P.max()
    if low < -atol or high > 1 + atol:
        i, j = np.unravel_index(np.argmax(np.maximum(-P, P - 1)), P.shape)
        raise ValueError(
            f"P entries must lie in [0, 1]: P[{i}, {j}] = {P[i, j]:.6g} is outside by "
            f"{max(-P[i, j], P[i, j] - 1):.3g}"
        )
    deviation = np.abs(P + P.T - 1.0)
    worst = float(deviation.max())
    if worst > atol:
        i, j = np.unravel_index(np.argmax(deviation), P.shape)
        raise ValueError(
            f"P + Pᵀ must equal 1 (P(i ≻ j) + P(j ≻ i) = 1): P[{i}, {j}] + P[{j}, {i}] = "
            f"{P[i, j] + P[j, i]:.6g}, off by {worst:.3g}"
        )
    return P


def check_policy(pi: np.ndarray, n: int, name: str = "mu", atol: float = ATOL) -> np.ndarray:
    """Return ``pi`` as a float64 vector over ``n`` actions, strictly positive, summing to 1."""
    pi = np.asarray(pi, dtype=np.float64)
    if pi.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) to match P, got {pi.shape}")
    if not np.all(np.isfinite(pi)):
        raise ValueError(
            f"{name} has non-finite entries at {np.flatnonzero(~np.isfinite(pi)).tolist()}"
        )
    if np.any(pi <= 0):
        bad = np.flatnonzero(pi <= 0)
        raise ValueError(
            f"{name} must be strictly positive (KL to it is infinite otherwise): "
            f"{len(bad)} entr{'y' if len(bad) == 1 else 'ies'} ≤ 0, first at index {bad[0]} "
            f"({pi[bad[0]]:.3g})"
        )
    total = float(pi.sum())
    if abs(total - 1.0) > atol:
        raise ValueError(f"{name} must sum to 1, sums to {total:.12g} (off by {total - 1:.3g})")
    return pi


def check_tau(tau: float) -> float:
    tau = float(tau)
    if not np.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau must be a finite number > 0, got {tau}")
    return tau


def check_step(eta: float, tau: float, t: int | None = None) -> float:
    """Check one step size: η > 0 and η·τ ≤ 1 (the geometric mixture needs 1 − ητ ≥ 0)."""
    eta = float(eta)
    at = "" if t is None else f" at step {t}"
    if not np.isfinite(eta) or eta <= 0:
        raise ValueError(f"eta{at} must be a finite number > 0, got {eta}")
    if eta * tau > 1 + 1e-12:
        raise ValueError(
            f"eta·tau must be ≤ 1{at}: eta={eta:.6g}, tau={tau:.6g}, eta·tau={eta * tau:.6g} "
            f"exceeds 1 by {eta * tau - 1:.3g}"
        )
    return eta
