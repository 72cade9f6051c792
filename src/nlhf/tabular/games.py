"""Preference games: matrices ``P[i, j] = P(action i ≻ action j)`` with ``P + Pᵀ = 1``.

    from nlhf.tabular.games import make_game
    game = make_game("cycle", n=3)          # rock-paper-scissors
    game.P, game.description

Families:
- ``random``: intransitive in general, ``P = σ(A)`` with ``A`` a random skew-symmetric matrix.
- ``cycle``: rock-paper-scissors generalized to n actions (each beats the next ⌊(n−1)/2⌋).
- ``cycle-dominated``: a cycle over n−1 actions plus one action every other beats.
- ``bradley-terry``: consistent with a reward, ``P = σ(s_i − s_j)`` for a score vector s.
- ``condorcet``: preferences of a population that no reward can represent faithfully: a
  majority prefers action 0 to every other, yet the Bradley–Terry fit ranks action 1 first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GAMES = ("random", "cycle", "cycle-dominated", "bradley-terry", "condorcet")


@dataclass(frozen=True)
class Game:
    """A named preference matrix with a one-line description for reports."""

    name: str
    P: np.ndarray
    description: str

    @property
    def n(self) -> int:
        return self.P.shape[0]


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))


def from_skew(A: np.ndarray) -> np.ndarray:
    """``P = ½ + A`` for a skew-symmetric ``A`` with entries in [−½, ½] (exactly P + Pᵀ = 1)."""
    A = np.asarray(A, dtype=np.float64)
    A = 0.5 * (A - A.T)
    return 0.5 + A


def random_intransitive(n: int, seed: int = 0, scale: float = 2.0) -> np.ndarray:
    """``P = σ(A)``, ``A`` skew-symmetric with N(0, scale²) entries: intransitive in general."""
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.normal(0.0, scale, size=(n, n)), k=1)
    return sigmoid(upper - upper.T)


def cycle(n: int = 3, strength: float = 0.4) -> np.ndarray:
    """Generalized rock-paper-scissors: action i beats i+1, …, i+⌊(n−1)/2⌋ (mod n) with
    probability ½ + strength; for even n, opposite actions tie."""
    if not 0 < strength <= 0.5:
        raise ValueError(f"strength must be in (0, 0.5], got {strength}")
    offsets = (np.arange(n)[None, :] - np.arange(n)[:, None]) % n  # j − i mod n
    A = np.zeros((n, n))
    A[(offsets >= 1) & (2 * offsets < n)] = strength
    A[(offsets >= 1) & (2 * offsets > n)] = -strength
    return 0.5 + A


def cycle_with_dominated(n: int = 4, strength: float = 0.4) -> np.ndarray:
    """A cycle over the first n−1 actions plus a last action that loses to every other one."""
    if n < 4:
        raise ValueError(f"cycle-dominated needs n ≥ 4 (a cycle of 3 plus one), got {n}")
    P = np.full((n, n), 0.5)
    P[: n - 1, : n - 1] = cycle(n - 1, strength)
    P[: n - 1, n - 1] = 0.5 + strength
    P[n - 1, : n - 1] = 0.5 - strength
    return P


def bradley_terry(scores: np.ndarray) -> np.ndarray:
    """``P[i, j] = σ(s_i − s_j)``: the preferences of a reward model with reward ``s``."""
    s = np.asarray(scores, dtype=np.float64)
    return sigmoid(s[:, None] - s[None, :])


def condorcet(majority: float = 0.6, noise: float = 0.1) -> np.ndarray:
    """Three answers judged by a population split in two groups.

    A share ``majority`` (> ½) ranks 0 ≻ 1 ≻ 2; the rest ranks 1 ≻ 2 ≻ 0; a share ``noise`` of
    all judgements is a coin flip.  Head to head, a majority prefers 0 to each other answer
    (0 is the Condorcet winner and the unregularized Nash equilibrium), but 1 wins more
    comparisons in total, so a Bradley–Terry reward fitted to these preferences ranks 1 first
    and RLHF moves probability to an answer that a majority rejects against 0.
    """
    if not 0.5 < majority < 1:
        raise ValueError(f"majority must be in (0.5, 1), got {majority}")
    if not 0 < noise <= 1:
        raise ValueError(f"noise must be in (0, 1] (0 makes the reward fit diverge), got {noise}")
    m = majority
    population = np.array(
        [
            [0.5, m, m],
            [1 - m, 0.5, 1.0],
            [1 - m, 0.0, 0.5],
        ]
    )
    return (1.0 - noise) * population + noise * 0.5


def make_game(name: str, n: int = 3, seed: int = 0) -> Game:
    """Build a game by family name (see :data:`GAMES`) with ``n`` actions where it applies."""
    if name == "random":
        return Game(
            name, random_intransitive(n, seed), f"random intransitive game, n={n}, seed={seed}"
        )
    if name == "cycle":
        return Game(name, cycle(n), f"rock-paper-scissors cycle over {n} actions")
    if name == "cycle-dominated":
        n = max(n, 4)
        return Game(
            name, cycle_with_dominated(n), f"cycle over {n - 1} actions plus one dominated action"
        )
    if name == "bradley-terry":
        scores = np.random.default_rng(seed).normal(0.0, 1.5, size=n)
        return Game(
            name,
            bradley_terry(scores),
            f"Bradley–Terry-consistent game from random scores, n={n}, seed={seed}",
        )
    if name == "condorcet":
        return Game(
            name,
            condorcet(),
            "a Condorcet winner (0) that the reward model ranks second: 60% rank "
            "0≻1≻2, 40% rank 1≻2≻0, 10% of labels are coin flips",
        )
    raise ValueError(f"unknown game {name!r}; choose one of {', '.join(GAMES)}")


def reference_policy(n: int, kind: str = "uniform", seed: int = 0) -> np.ndarray:
    """A reference policy μ: ``uniform`` or ``random`` (Dirichlet(1), floored at 1e-3)."""
    if kind == "uniform":
        return np.full(n, 1.0 / n)
    if kind == "random":
        mu = np.random.default_rng(seed + 1).dirichlet(np.ones(n)) + 1e-3
        return mu / mu.sum()
    raise ValueError(f"unknown reference policy {kind!r}; choose uniform or random")
