"""Learning dynamics for regularized preference games, all in closed form (numpy only).

    from nlhf.tabular import nash_md
    traj = nash_md(P, mu, tau=0.1, eta=0.5, steps=1000)        # (steps + 1, n)
    traj = nash_md(P, mu, tau=0.1, eta=lambda t: 2 / (0.1 * (t + 2)), steps=1000)

Every algorithm returns the trajectory π_0 … π_T as an array of shape (T + 1, n) and works
in log space, so probabilities far below 1e-300 stay exact.  With ``a_t = η_t·τ``:

- Nash-MD (Munos et al. 2023): the opponent is the geometric mixture of the policy and μ,
      π_t^μ ∝ π_t^{1−a_t} μ^{a_t},   π_{t+1} ∝ π_t^μ · exp(η_t · P π_t^μ).
- ``mixture_md(beta)``: the same regularized step, π_{t+1} ∝ π_t^{1−a_t} μ^{a_t} exp(η_t P ν_t),
  against the opponent ν_t ∝ π_t^{1−β} μ^β: β = 0 is self-play, β = 1 the best response to μ
  (and β = a_t is Nash-MD itself).
- Nash-EMA: the opponent is a geometric running average of past policies,
  log ν_t = (1−α) log ν_{t−1} + α log π_t (normalized), the tabular counterpart of an
  exponential moving average of a softmax policy's parameters.
- Nash-MP (mirror prox, Tiapkin et al. 2025): an extra-gradient step,
      π_{t+½} ∝ (π_t μ^a exp(η P π_t))^{1/(1+a)},
      π_{t+1} ∝ (π_t μ^a exp(η P π_{t+½}))^{1/(1+a)}.
- OMWU (optimistic multiplicative weights) with the same KL regularization, using the
  optimistic gradient 2·P π_t − P π_{t−1}.

Step sizes: a float, or a callable t ↦ η_t (e.g. :func:`theorem_schedule`); η_t·τ ≤ 1 is
required at every step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from tqdm.auto import tqdm

from nlhf.tabular.validation import check_policy, check_preference_matrix, check_step, check_tau

Eta = float | Callable[[int], float]


def theorem_schedule(tau: float) -> Callable[[int], float]:
    """η_t = 2 / (τ (t + 2)): with it Nash-MD's last iterate is within 8/(τ²(T+1)) of π* in KL."""
    return lambda t: 2.0 / (tau * (t + 2))


def _normalize_log(x: np.ndarray) -> np.ndarray:
    """Shift log-weights so that exp(x) sums to one."""
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def _setup(P, mu, tau, eta, steps, pi0):
    P = check_preference_matrix(P)
    n = P.shape[0]
    mu = check_policy(mu, n, "mu")
    pi0 = mu if pi0 is None else check_policy(pi0, n, "pi0")
    tau = check_tau(tau)
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps}")
    if callable(eta):

        def eta_at(t: int) -> float:
            return check_step(eta(t), tau, t)
    else:
        constant = check_step(eta, tau)

        def eta_at(t: int) -> float:
            return constant

    out = np.empty((int(steps) + 1, n))
    out[0] = pi0
    return P, mu, tau, eta_at, np.log(pi0), np.log(mu), out


def _range(steps: int, progress: bool, desc: str):
    if not progress:
        return range(steps)
    return tqdm(range(steps), desc=desc, unit="step", mininterval=0.5, leave=False)


def nash_md(
    P: np.ndarray,
    mu: np.ndarray,
    *,
    tau: float,
    eta: Eta,
    steps: int,
    pi0: np.ndarray | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Nash mirror descent; returns π_0 … π_T, shape (steps + 1, n). ``pi0`` defaults to μ."""
    P, mu, tau, eta_at, log_pi, log_mu, out = _setup(P, mu, tau, eta, steps, pi0)
    for t in _range(int(steps), progress, "nash-md"):
        eta_t = eta_at(t)
        a = eta_t * tau
        # Geometric mixture π_t^μ ∝ π_t^{1−a} μ^a, normalized, kept both as log and as probs.
        mix = (1.0 - a) * log_pi + a * log_mu
        mix -= mix.max()
        weights = np.exp(mix)
        total = weights.sum()
        mix_probs = weights / total
        log_pi = mix - np.log(total) + eta_t * (P @ mix_probs)
        log_pi -= log_pi.max()
        probs = np.exp(log_pi)
        total = probs.sum()
        log_pi -= np.log(total)
        np.divide(probs, total, out=out[t + 1])
    return out


def mixture_md(
    P: np.ndarray,
    mu: np.ndarray,
    *,
    tau: float,
    eta: Eta,
    steps: int,
    beta: float,
    pi0: np.ndarray | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Regularized mirror descent against the mixture opponent ν_t ∝ π_t^{1−β} μ^β.

    β = 0: self-play (the opponent is the current policy); β = 1: best response to μ.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    P, mu, tau, eta_at, log_pi, log_mu, out = _setup(P, mu, tau, eta, steps, pi0)
    for t in _range(int(steps), progress, f"mixture β={beta:g}"):
        eta_t = eta_at(t)
        a = eta_t * tau
        opponent = np.exp(_normalize_log((1.0 - beta) * log_pi + beta * log_mu))
        log_pi = _normalize_log((1.0 - a) * log_pi + a * log_mu + eta_t * (P @ opponent))
        out[t + 1] = np.exp(log_pi)
    return out


def nash_ema(
    P: np.ndarray,
    mu: np.ndarray,
    *,
    tau: float,
    eta: Eta,
    steps: int,
    ema: float = 0.1,
    pi0: np.ndarray | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Regularized mirror descent against a geometric moving average of past policies."""
    if not 0.0 < ema <= 1.0:
        raise ValueError(f"ema must be in (0, 1], got {ema}")
    P, mu, tau, eta_at, log_pi, log_mu, out = _setup(P, mu, tau, eta, steps, pi0)
    log_avg = log_pi.copy()
    for t in _range(int(steps), progress, "nash-ema"):
        eta_t = eta_at(t)
        a = eta_t * tau
        log_avg = _normalize_log((1.0 - ema) * log_avg + ema * log_pi)
        log_pi = _normalize_log((1.0 - a) * log_pi + a * log_mu + eta_t * (P @ np.exp(log_avg)))
        out[t + 1] = np.exp(log_pi)
    return out


def nash_mp(
    P: np.ndarray,
    mu: np.ndarray,
    *,
    tau: float,
    eta: Eta,
    steps: int,
    pi0: np.ndarray | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Nash mirror prox: a look-ahead step, then the real step with the look-ahead's gradient."""
    P, mu, tau, eta_at, log_pi, log_mu, out = _setup(P, mu, tau, eta, steps, pi0)
    pi = out[0]
    for t in _range(int(steps), progress, "nash-mp"):
        eta_t = eta_at(t)
        a = eta_t * tau
        anchor = log_pi + a * log_mu
        half = np.exp(_normalize_log((anchor + eta_t * (P @ pi)) / (1.0 + a)))
        log_pi = _normalize_log((anchor + eta_t * (P @ half)) / (1.0 + a))
        pi = out[t + 1] = np.exp(log_pi)
    return out


def omwu(
    P: np.ndarray,
    mu: np.ndarray,
    *,
    tau: float,
    eta: Eta,
    steps: int,
    pi0: np.ndarray | None = None,
    progress: bool = False,
) -> np.ndarray:
    """Optimistic multiplicative weights with KL regularization toward μ."""
    P, mu, tau, eta_at, log_pi, log_mu, out = _setup(P, mu, tau, eta, steps, pi0)
    previous = P @ out[0]
    for t in _range(int(steps), progress, "omwu"):
        eta_t = eta_at(t)
        a = eta_t * tau
        current = P @ out[t]
        log_pi = _normalize_log(
            (1.0 - a) * log_pi + a * log_mu + eta_t * (2.0 * current - previous)
        )
        previous = current
        out[t + 1] = np.exp(log_pi)
    return out
