"""One tabular experiment: every algorithm on one game, measured against the exact equilibrium.

    from nlhf.tabular.experiment import compare
    result = compare(game, mu, tau=0.1, eta=1.0, steps=2000,
                     algorithms=["nash-md", "nash-mp", "self-play"])
    result.rows  # final KL to π*, exploitability, win rates, for each algorithm and for RLHF

Used by ``nlhf tabular``; importable on its own for notebooks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nlhf.tabular.dynamics import (
    Eta,
    mixture_md,
    nash_ema,
    nash_md,
    nash_mp,
    omwu,
    theorem_schedule,
)
from nlhf.tabular.games import Game, sigmoid
from nlhf.tabular.measures import exploitability, kl, kl_rows, total_variation, win_rate
from nlhf.tabular.rlhf import fit_bradley_terry, rlhf_policy
from nlhf.tabular.solver import solve_regularized_nash

Dynamics = Callable[..., np.ndarray]

ALGORITHMS: dict[str, tuple[str, Dynamics]] = {
    "nash-md": ("Nash-MD (mixture opponent)", nash_md),
    "nash-mp": ("Nash-MP (mirror prox)", nash_mp),
    "nash-ema": ("Nash-EMA (averaged opponent)", nash_ema),
    "omwu": ("OMWU (optimistic)", omwu),
    "self-play": ("self-play (β = 0)", lambda *a, **k: mixture_md(*a, beta=0.0, **k)),
    "best-response": ("best response to μ (β = 1)", lambda *a, **k: mixture_md(*a, beta=1.0, **k)),
}


@dataclass
class Row:
    """The measures of one final policy."""

    name: str
    policy: np.ndarray
    kl_to_nash: float
    exploitability: float
    exploitability_unregularized: float
    win_vs_nash: float
    win_vs_reference: float
    kl_to_reference: float

    def as_dict(self) -> dict:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in vars(self).items()}


@dataclass
class GameResult:
    """Everything measured on one game; ``curves`` holds KL(π*‖π_t) for t = 0 … T."""

    game: Game
    mu: np.ndarray
    tau: float
    pi_star: np.ndarray
    reward: np.ndarray
    reward_fit_error: float
    rows: list[Row] = field(default_factory=list)
    curves: dict[str, np.ndarray] = field(default_factory=dict)
    bound: np.ndarray | None = None


def measure(
    name: str, pi: np.ndarray, P: np.ndarray, mu: np.ndarray, tau: float, pi_star: np.ndarray
) -> Row:
    return Row(
        name=name,
        policy=pi,
        kl_to_nash=kl(pi_star, pi),
        exploitability=exploitability(P, pi, mu, tau),
        exploitability_unregularized=exploitability(P, pi),
        win_vs_nash=win_rate(P, pi, pi_star),
        win_vs_reference=win_rate(P, pi, mu),
        kl_to_reference=kl(pi, mu),
    )


def theorem_bound(kl0: float, tau: float, eta: Eta, steps: int) -> np.ndarray:
    """Theorem 1's bound on KL(π*‖π_t) for Nash-MD: B_{t+1} = (1 − η_t τ) B_t + 2 η_t²."""
    bound = np.empty(steps + 1)
    bound[0] = kl0
    for t in range(steps):
        eta_t = eta(t) if callable(eta) else eta
        bound[t + 1] = (1.0 - eta_t * tau) * bound[t] + 2.0 * eta_t**2
    return bound


def compare(
    game: Game,
    mu: np.ndarray,
    *,
    tau: float,
    eta: float,
    steps: int,
    algorithms: list[str],
    schedule: str = "constant",
    ema: float = 0.1,
    progress: bool = False,
) -> GameResult:
    """Run each algorithm from μ, solve the game exactly, fit RLHF, and measure them all."""
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        raise ValueError(f"unknown algorithm(s) {unknown}; choose from {', '.join(ALGORITHMS)}")
    if schedule not in ("constant", "theorem"):
        raise ValueError(f"schedule must be 'constant' or 'theorem', got {schedule!r}")
    P = game.P
    step: Eta = theorem_schedule(tau) if schedule == "theorem" else eta
    pi_star = solve_regularized_nash(P, mu, tau)
    reward = fit_bradley_terry(P)
    result = GameResult(
        game=game,
        mu=mu,
        tau=tau,
        pi_star=pi_star,
        reward=reward,
        reward_fit_error=float(np.abs(sigmoid(reward[:, None] - reward[None, :]) - P).max()),
    )
    for name in algorithms:
        kwargs = {"ema": ema} if name == "nash-ema" else {}
        traj = ALGORITHMS[name][1](
            P, mu, tau=tau, eta=step, steps=steps, progress=progress, **kwargs
        )
        result.curves[name] = kl_rows(pi_star, traj)
        result.rows.append(measure(name, traj[-1], P, mu, tau, pi_star))
    result.rows.append(measure("rlhf", rlhf_policy(reward, mu, tau), P, mu, tau, pi_star))
    result.rows.append(measure("reference", mu, P, mu, tau, pi_star))
    result.bound = theorem_bound(kl(pi_star, mu), tau, step, steps)
    return result


def rlhf_gap(result: GameResult) -> dict[str, float]:
    """How far the RLHF answer is from the Nash equilibrium on this game."""
    rlhf = next(r for r in result.rows if r.name == "rlhf")
    return {
        "reward_fit_error": result.reward_fit_error,
        "tv_rlhf_to_nash": total_variation(rlhf.policy, result.pi_star),
        "kl_nash_to_rlhf": rlhf.kl_to_nash,
        "rlhf_exploitability": rlhf.exploitability,
        "rlhf_exploitability_unregularized": rlhf.exploitability_unregularized,
        "nash_win_vs_rlhf": 1.0 - rlhf.win_vs_nash,
    }


SWEEP_TAUS = (1.0, 0.1, 0.01, 0.001)


def rlhf_sweep(game: Game, mu: np.ndarray, taus: tuple[float, ...] = SWEEP_TAUS) -> dict:
    """TV(π_RLHF, π*) as τ shrinks: → 0 on Bradley–Terry games, bounded away on others."""
    reward = fit_bradley_terry(game.P)
    return {
        tau: total_variation(rlhf_policy(reward, mu, tau), solve_regularized_nash(game.P, mu, tau))
        for tau in taus
    }
