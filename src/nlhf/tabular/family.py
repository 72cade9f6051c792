"""The general-preference family's exact policy-space updates on a matrix game (numpy only).

    from nlhf.tabular.family import inpo, egpo, magnet_reset, mmd, sampled_oracle
    traj = egpo(P, mu, tau=0.1, eta=1.0, steps=500)                 # (501, n): π_0 … π_T
    traj = magnet_reset(mmd, P, mu, tau=0.1, eta=1.0, steps=5000, every=50)
    traj = inpo(P, mu, tau=0.1, eta=1.0, steps=500, oracle=sampled_oracle(P, 64, rng))

One convention for every method: τ weights KL(π‖μ) in the game
P(π ≻ π′) − τKL(π‖μ) + τKL(π′‖μ), and η is the step size, so each step maximizes
η·[⟨π, g⟩ − τKL(π‖μ)] − KL(π‖π_t), the proximal term KL(π‖π_t) weighted 1/η.  Here
g(y) = P(y ≻ ν) is a vector of win rates, asked of an *oracle* (exact: P ν; or
:func:`sampled_oracle`), and a = η·τ.  The update of each method is in its docstring;
docs/nash-family.md maps every paper's names and published values onto (τ, η).
All work in log space and return the trajectory, shape (steps + 1, n); ``eta`` is a float
or a callable t ↦ η_t.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nlhf.tabular.dynamics import Eta, nash_mp
from nlhf.tabular.dynamics import nash_md as _nash_md
from nlhf.tabular.solver import solve_regularized_nash
from nlhf.tabular.validation import check_policy, check_preference_matrix, check_step

Oracle = Callable[[np.ndarray], np.ndarray]  # ν ↦ the win rates P(y ≻ ν) of every action y
Method = Callable[..., np.ndarray]
FLOOR = 1e-300  # smallest probability a reset magnet keeps, so that log μ stays finite


def sampled_oracle(P: np.ndarray, comparisons: int, rng: np.random.Generator) -> Oracle:
    """Win rates estimated from ``comparisons`` sampled duels per action and query.

    For each action y: draw y′₁ … y′_m from ν, one Bernoulli(P[y, y′ᵢ]) outcome each, and
    return the share won.  Unbiased for P ν, with variance ≤ 1/(4m) per action.
    """
    P = check_preference_matrix(P)
    if int(comparisons) != comparisons or comparisons < 1:
        raise ValueError(f"comparisons must be a positive integer, got {comparisons}")
    m, n = int(comparisons), P.shape[0]

    def oracle(nu: np.ndarray) -> np.ndarray:
        opponents = rng.multinomial(m, nu / nu.sum(), size=n)  # (n, n) counts of each y′
        return rng.binomial(opponents, P).sum(axis=1) / m

    return oracle


def _normalize(x: np.ndarray) -> np.ndarray:
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def _prepare(P, mu, tau, eta, steps, pi0, oracle, linearized):
    """Check the inputs; return (P, log μ, τ, t ↦ η_t, oracle, output with π_0 filled in)."""
    P = check_preference_matrix(P)
    n = P.shape[0]
    mu = check_policy(mu, n, "mu")
    pi0 = mu if pi0 is None else check_policy(pi0, n, "pi0")
    tau = float(tau)
    if not np.isfinite(tau) or tau < 0:
        raise ValueError(f"tau must be a finite number ≥ 0, got {tau}")
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps}")
    bound = tau if linearized else 0.0  # π_t^{1−a} needs a = ητ ≤ 1

    def eta_at(t: int) -> float:
        return check_step(eta(t) if callable(eta) else eta, bound, t)

    out = np.empty((int(steps) + 1, n))
    out[0] = pi0
    win = oracle if oracle is not None else (lambda nu: P @ nu)
    return P, np.log(mu), tau, eta_at, win, out


def sppo(P, mu, *, eta: Eta, steps: int, pi0=None, oracle: Oracle | None = None) -> np.ndarray:
    """SPPO's ideal step, multiplicative weights (plain self-play, no KL to μ; μ is only π_0):
    π_{t+1} ∝ π_t · exp(η P(y ≻ π_t))."""
    return inpo(P, mu, tau=0.0, eta=eta, steps=steps, pi0=pi0, oracle=oracle)


def inpo(
    P, mu, *, tau: float, eta: Eta, steps: int, pi0=None, oracle: Oracle | None = None
) -> np.ndarray:
    """INPO's OMD step, the KL to μ linearized at π_t (τ = 0: SPPO):
    π_{t+1} ∝ π_t^{1−a} μ^a exp(η P(y ≻ π_t))."""
    P, log_mu, tau, eta_at, win, out = _prepare(P, mu, tau, eta, steps, pi0, oracle, True)
    log_pi = np.log(out[0])
    for t in range(int(steps)):
        eta_t = eta_at(t)
        a = eta_t * tau
        log_pi = _normalize((1 - a) * log_pi + a * log_mu + eta_t * win(out[t]))
        out[t + 1] = np.exp(log_pi)
    return out


def onpo(
    P, mu, *, tau: float, eta: Eta, steps: int, pi0=None, oracle: Oracle | None = None
) -> np.ndarray:
    """Optimistic INPO: with g_t = P(y ≻ π_t) − τ log(π_t/μ), a secondary sequence
    log π̂_{t+1} = log π̂_t + η_t g_t, and the played π_{t+1} ∝ π̂_{t+1} exp(η_{t+1} g_t)
    (prediction: the last gradient; π̂_0 is set so that the first step is INPO's).
    With constant η: log π_{t+1} = log π_t + η (2 g_t − g_{t−1}); τ = 0 is OMWU."""
    P, log_mu, tau, eta_at, win, out = _prepare(P, mu, tau, eta, steps, pi0, oracle, False)
    log_pi = np.log(out[0])
    g = win(out[0]) - tau * (log_pi - log_mu)
    log_hat = log_pi - eta_at(0) * g
    for t in range(int(steps)):
        log_hat = log_hat + eta_at(t) * g
        log_pi = _normalize(log_hat + eta_at(t + 1) * g)
        out[t + 1] = np.exp(log_pi)
        g = win(out[t + 1]) - tau * (log_pi - log_mu)
    return out


def nash_md(
    P, mu, *, tau: float, eta: Eta, steps: int, pi0=None, oracle: Oracle | None = None
) -> np.ndarray:
    """Nash-MD (exact oracle: :func:`nlhf.tabular.dynamics.nash_md`), against the mixture
    π_t^μ ∝ π_t^{1−a} μ^a:  π_{t+1} ∝ π_t^μ exp(η P(y ≻ π_t^μ))."""
    if oracle is None:
        return _nash_md(P, mu, tau=tau, eta=eta, steps=steps, pi0=pi0)
    P, log_mu, tau, eta_at, win, out = _prepare(P, mu, tau, eta, steps, pi0, oracle, True)
    log_pi = np.log(out[0])
    for t in range(int(steps)):
        eta_t = eta_at(t)
        mix = _normalize((1 - eta_t * tau) * log_pi + eta_t * tau * log_mu)
        log_pi = _normalize(mix + eta_t * win(np.exp(mix)))
        out[t + 1] = np.exp(log_pi)
    return out


def online_ipo(
    P,
    mu,
    *,
    tau: float,
    eta: Eta,
    steps: int,
    mixture: float = 0.0,
    pi0=None,
    oracle: Oracle | None = None,
) -> np.ndarray:
    """Gradient descent on the logits θ of the population online-IPO loss
    E_{y,y′∼ρ}[(h_θ(y, y′) − h_μ(y, y′) − (P(y ≻ y′) − ½)/τ)²] with ρ_t held fixed:
    θ_{t+1} = θ_t + η ρ_t ⊙ [P(y ≻ ρ_t) − ½ − τ(d_t − E_ρ d_t)],  d_t = log(π_t/μ),
    (η = 4·lr/τ for learning rate lr).  ρ_t = π_t is online IPO; ``mixture`` = β > 0 samples
    from ρ_t ∝ π_t^{1−β} μ^β, which is IPO-MD."""
    if not 0.0 <= mixture <= 1.0:
        raise ValueError(f"mixture must be in [0, 1], got {mixture}")
    P, log_mu, tau, eta_at, win, out = _prepare(P, mu, tau, eta, steps, pi0, oracle, False)
    log_pi = np.log(out[0])
    for t in range(int(steps)):
        rho = np.exp(_normalize((1 - mixture) * log_pi + mixture * log_mu))
        d = log_pi - log_mu
        log_pi = _normalize(log_pi + eta_at(t) * rho * (win(rho) - 0.5 - tau * (d - rho @ d)))
        out[t + 1] = np.exp(log_pi)
    return out


def egpo(
    P, mu, *, tau: float, eta: Eta, steps: int, pi0=None, oracle: Oracle | None = None
) -> np.ndarray:
    """Extragradient on INPO's linearized step (EGPO's exact tabular update):
    π_{t+½} ∝ π_t^{1−a} μ^a exp(η P(y ≻ π_t)),  π_{t+1} ∝ π_t^{1−a} μ^a exp(η P(y ≻ π_{t+½}))."""
    P, log_mu, tau, eta_at, win, out = _prepare(P, mu, tau, eta, steps, pi0, oracle, True)
    log_pi = np.log(out[0])
    for t in range(int(steps)):
        eta_t = eta_at(t)
        anchor = (1 - eta_t * tau) * log_pi + eta_t * tau * log_mu
        half = np.exp(_normalize(anchor + eta_t * win(out[t])))
        log_pi = _normalize(anchor + eta_t * win(half))
        out[t + 1] = np.exp(log_pi)
    return out


def mirror_prox(
    P, mu, *, tau: float, eta: Eta, steps: int, pi0=None, oracle: Oracle | None = None
) -> np.ndarray:
    """Nash-MP, mirror prox with exact proximal steps (exact oracle and τ > 0:
    :func:`nlhf.tabular.dynamics.nash_mp`):
    π_{t+½} ∝ (π_t μ^a e^{η P π_t})^{1/(1+a)},  π_{t+1} ∝ (π_t μ^a e^{η P π_{t+½}})^{1/(1+a)}."""
    if oracle is None and tau > 0:
        return nash_mp(P, mu, tau=tau, eta=eta, steps=steps, pi0=pi0)
    P, log_mu, tau, eta_at, win, out = _prepare(P, mu, tau, eta, steps, pi0, oracle, True)
    log_pi = np.log(out[0])
    for t in range(int(steps)):
        eta_t = eta_at(t)
        a = eta_t * tau
        anchor = log_pi + a * log_mu
        half = np.exp(_normalize((anchor + eta_t * win(out[t])) / (1 + a)))
        log_pi = _normalize((anchor + eta_t * win(half)) / (1 + a))
        out[t + 1] = np.exp(log_pi)
    return out


def mmd(
    P, mu, *, tau: float, eta: Eta, steps: int, pi0=None, oracle: Oracle | None = None
) -> np.ndarray:
    """Magnetic mirror descent (MPO's step), magnet μ, exact proximal step:
    π_{t+1} ∝ (π_t μ^a exp(η P(y ≻ π_t)))^{1/(1+a)}."""
    P, log_mu, tau, eta_at, win, out = _prepare(P, mu, tau, eta, steps, pi0, oracle, False)
    log_pi = np.log(out[0])
    for t in range(int(steps)):
        eta_t = eta_at(t)
        a = eta_t * tau
        log_pi = _normalize((log_pi + a * log_mu + eta_t * win(out[t])) / (1 + a))
        out[t + 1] = np.exp(log_pi)
    return out


def proximal_point(P, mu, *, tau: float, steps: int, pi0=None) -> np.ndarray:
    """COMAL with exact inner solves: π_{t+1} = the τ-regularized equilibrium with reference
    π_t (π_0 = ``pi0``, default μ).  Converges to an unregularized Nash equilibrium."""
    P = check_preference_matrix(P)
    start = mu if pi0 is None else pi0
    out = np.empty((int(steps) + 1, P.shape[0]))
    out[0] = check_policy(start, P.shape[0], "pi0")
    for t in range(int(steps)):
        out[t + 1] = solve_regularized_nash(P, _floored(out[t]), tau)
    return out


def magnet_reset(
    method: Method,
    P,
    mu,
    *,
    tau: float,
    eta: Eta,
    steps: int,
    every: int,
    pi0=None,
    **kwargs,
) -> np.ndarray:
    """Any regularized ``method`` whose magnet μ is reset to the current policy every ``every``
    steps (MPO's reference reset; COMAL's outer loop with ``every`` inner steps).

    Block k runs ``method`` from π_{k·every} against μ_k = π_{k·every} (μ_0 = ``mu``); the
    magnet is floored at 1e-300 so its logarithm stays finite.  Other keyword arguments
    (``oracle``, ``mixture``, …) go to ``method``.
    """
    if int(every) != every or every < 1:
        raise ValueError(f"every must be a positive integer, got {every}")
    P = check_preference_matrix(P)
    magnet = check_policy(mu, P.shape[0], "mu")
    pi = magnet if pi0 is None else pi0
    blocks, done = [np.asarray(pi, dtype=np.float64)[None]], 0
    while done < steps:
        k = min(int(every), int(steps) - done)
        shifted = (lambda t, s=done: eta(t + s)) if callable(eta) else eta
        traj = method(P, magnet, tau=tau, eta=shifted, steps=k, pi0=pi, **kwargs)
        blocks.append(traj[1:])
        pi = magnet = _floored(traj[-1])
        done += k
    return np.concatenate(blocks)


def _floored(pi: np.ndarray) -> np.ndarray:
    pi = np.maximum(pi, FLOOR)
    return pi / pi.sum()
