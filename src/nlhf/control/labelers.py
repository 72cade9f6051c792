"""Synthetic labelers that compare two segments: an oracle, B-Pref's irrational teachers, and a
population of annotators whose majority can cycle.

    labeler = make_labeler("mistake")                  # or oracle, noisy, skip, myopic, equal
    labeler = make_labeler("population", population="cartpole")
    y = labeler.label(pairs, rng)                      # 1 first, 0 second, ½ tie, NaN can't tell
    p = labeler.prob(pairs)                            # the labeler's P(first ≻ second)

Every labeler answers a list of (a, b) segment pairs with one float each: 1.0 when it prefers
the first, 0.0 the second, 0.5 for "equally good", NaN for "can't tell" (callers drop those
rows).  ``prob`` is the expected answer among the ones it gives (ties count ½), the preference
function that evaluation uses for win rates.  The teacher follows B-Pref (Lee et al. 2021,
rll-research/BPref ``get_label``): skip, then equal, then a (myopic, Boltzmann) choice, then a
mistake.  The population is the LM population's formula over segments: annotator groups
(:class:`~nlhf.models.judges.population.AnnotatorGroup`) with score functions of a segment,
each preferring a with σ((s(a) − s(b))/T), the population with their weighted mean; a label
is one drawn annotator's binary choice.  People label through ``nlhf.control.human``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol

import numpy as np

from nlhf.config import Checked, option
from nlhf.control.segments import Segment
from nlhf.errors import UserError
from nlhf.models.judges.population import (
    AnnotatorGroup,
    group_preferences,
    group_weights,
    population_preference,
)

Pairs = Sequence[tuple[Segment, Segment]]
SegmentScore = Callable[[Segment], float]

FIRST, SECOND, TIE, CANT_TELL = 1.0, 0.0, 0.5, math.nan

LabelerName = Literal[
    "oracle", "noisy", "mistake", "skip", "myopic", "equal", "population", "human"
]
"""The labelers a route can ask: the synthetic ones here, or people (``human``)."""


class LabelerError(UserError, ValueError):
    """An unknown labeler, or an option of one that is unknown or out of range."""


class ControlLabeler(Protocol):
    """What answers pairs of segments: a synthetic labeler here, or people."""

    def label(self, pairs: Pairs, rng: np.random.Generator) -> np.ndarray:
        """[len(pairs)] answers: 1.0, 0.0, 0.5 or NaN."""
        ...

    def prob(self, pairs: Pairs) -> np.ndarray:
        """[len(pairs)] P(first ≻ second) among the answers given (NaN: never answers)."""
        ...


def _returns(pairs: Pairs, gamma: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """True returns of both sides; step t of L weighs γ^(L−1−t) (the last step weighs 1)."""

    def discounted(s: Segment) -> float:
        r = np.asarray(s.rewards, dtype=np.float64)
        return float(np.dot(gamma ** np.arange(len(r) - 1, -1, -1, dtype=np.float64), r))

    a = np.array([discounted(x) for x, _ in pairs], dtype=np.float64)
    b = np.array([discounted(y) for _, y in pairs], dtype=np.float64)
    return a, b


class Oracle:
    """The higher true return wins; equal returns are a tie."""

    def prob(self, pairs: Pairs) -> np.ndarray:
        a, b = _returns(pairs)
        return np.where(a > b, FIRST, np.where(a < b, SECOND, TIE))

    def label(self, pairs: Pairs, rng: np.random.Generator) -> np.ndarray:
        return self.prob(pairs)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow warning for large |x|


@dataclass
class Teacher(Checked):
    """B-Pref's stochastic teacher.  A pair is skipped ("can't tell") when both true returns are
    at most ``skip``·scale, a tie when they differ by less than ``equal``·scale; otherwise the
    teacher prefers the first with σ(β·(R_γ(a) − R_γ(b))) on discounted returns, then flips
    its answer with probability ``mistake``."""

    beta: float = option(
        math.inf,
        "rationality β of the Boltzmann choice σ(β·ΔR); inf or any β < 0 is perfectly rational "
        "(B-Pref: −1), β = 0 a coin flip (B-Pref's code treats 0 as rational too)",
    )
    gamma: float = option(
        1.0, "myopia γ in (0, 1]: step t of L weighs γ^(L−1−t), so later steps count more"
    )
    mistake: float = option(0.0, "probability ε of flipping the answer (a mistake), in [0, 1]")
    skip: float = option(
        0.0, "skip threshold as a share of scale: both returns ≤ skip·scale → can't tell"
    )
    equal: float = option(0.0, "equal threshold as a share of scale: |ΔR| < equal·scale → tie")
    scale: float | None = option(
        None,
        "return of a typical segment that the thresholds are shares of (B-Pref: mean episode "
        "return × segment length / episode length); None: the mean return of the pairs labelled",
    )

    def check(self) -> None:
        checks = {
            "beta": not math.isnan(self.beta),
            "gamma": 0.0 < self.gamma <= 1.0,
            "mistake": 0.0 <= self.mistake <= 1.0,
            "skip": 0.0 <= self.skip,
            "equal": 0.0 <= self.equal,
            "scale": self.scale is None or math.isfinite(self.scale),
        }
        ranges = {"gamma": "in (0, 1]", "mistake": "in [0, 1]", "skip": "≥ 0", "equal": "≥ 0"}
        for name, ok in checks.items():
            if not ok:
                want = ranges.get(name, "a number")
                raise LabelerError(f"labeler option {name}={getattr(self, name)}: must be {want}")

    @property
    def rational(self) -> bool:
        return self.beta < 0 or math.isinf(self.beta)

    def thresholds(self, pairs: Pairs) -> tuple[float, float]:
        """(skip, equal) thresholds on the undiscounted return for these pairs."""
        if self.scale is not None:
            scale = self.scale
        else:
            a, b = _returns(pairs)
            scale = float(np.concatenate([a, b]).mean()) if len(pairs) else 0.0
        return self.skip * scale, self.equal * scale

    def outcome(self, pairs: Pairs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(skipped, tied, q): masks of skipped and tied pairs, and the probability of choosing
        the first before any mistake."""
        a, b = _returns(pairs)
        skip_at, equal_at = self.thresholds(pairs)
        skipped = (np.maximum(a, b) <= skip_at) if skip_at > 0 else np.zeros(len(a), bool)
        tied = np.abs(a - b) < equal_at
        da, db = _returns(pairs, self.gamma)
        if self.rational:
            q = np.where(da > db, 1.0, np.where(da < db, 0.0, 0.5))
        else:
            q = _sigmoid(self.beta * (da - db))
        return skipped, tied, q

    def prob(self, pairs: Pairs) -> np.ndarray:
        skipped, tied, q = self.outcome(pairs)
        p = (1 - self.mistake) * q + self.mistake * (1 - q)
        return np.where(skipped, math.nan, np.where(tied, TIE, p))

    def label(self, pairs: Pairs, rng: np.random.Generator) -> np.ndarray:
        skipped, tied, q = self.outcome(pairs)
        n = len(q)
        chosen = (rng.random(n) < q).astype(np.float64)  # a Boltzmann teacher flips a coin at ½
        choice = np.where(q == 0.5, TIE, chosen) if self.rational else chosen
        flip = rng.random(n) < self.mistake
        choice = np.where(flip & (choice != TIE), 1.0 - choice, choice)
        return np.where(skipped, CANT_TELL, np.where(tied, TIE, choice))


#: B-Pref's named teachers (README of rll-research/BPref); the rest of each is the oracle's.
PRESETS: dict[str, dict[str, float]] = {
    "oracle": {},
    "mistake": {"mistake": 0.1},
    "noisy": {"beta": 1.0},
    "skip": {"skip": 0.1},
    "myopic": {"gamma": 0.9},
    "equal": {"equal": 0.1},
}


class PopulationLabeler:
    """A weighted population of annotator groups, each scoring its own feature of a segment:
    P(a ≻ b) = Σ_g w_g σ((s_g(a) − s_g(b))/T_g) with Σ_g w_g = 1 (the formula of
    :func:`~nlhf.models.judges.population.population_preference`).  Antisymmetric, ½ against
    itself, and intransitive in general."""

    def __init__(self, groups: Sequence[AnnotatorGroup]) -> None:
        self.groups = list(groups)
        self.weights = group_weights(self.groups)
        self.temperatures = np.array([g.temperature for g in self.groups], dtype=np.float64)

    def _scores(self, pairs: Pairs) -> tuple[np.ndarray, np.ndarray]:
        """((G, B), (G, B)): every group's score of the first and of the second segments."""
        a = [[g.criterion(x) for x, _ in pairs] for g in self.groups]
        b = [[g.criterion(y) for _, y in pairs] for g in self.groups]
        return np.array(a, dtype=np.float64), np.array(b, dtype=np.float64)

    def group_probs(self, pairs: Pairs) -> np.ndarray:
        """[G, B]: each group's P(first ≻ second)."""
        return group_preferences(*self._scores(pairs), self.temperatures)

    def prob(self, pairs: Pairs) -> np.ndarray:
        return population_preference(*self._scores(pairs), self.weights, self.temperatures)

    def label(self, pairs: Pairs, rng: np.random.Generator) -> np.ndarray:
        """Per pair one annotator, drawn with the groups' weights, makes a binary choice."""
        probs = self.group_probs(pairs)
        n = probs.shape[1]
        drawn = rng.choice(len(self.groups), size=n, p=self.weights)
        return (rng.random(n) < probs[drawn, np.arange(n)]).astype(np.float64)


# --------------------------------------------------------------------------- CartPole population

# CartPole observations are [x, ẋ, θ, θ̇]; the episode ends at |x| > 2.4 or |θ| > 0.2095 rad.
CART_LIMIT, POLE_LIMIT = 2.4, 0.2095


def _mean_abs(column: int, unit: float) -> SegmentScore:
    return lambda s: float(np.mean(np.abs(np.asarray(s.obs)[:, column]))) / unit


def _negated(score: SegmentScore) -> SegmentScore:
    return lambda s: -score(s)


CARTPOLE_CRITERIA: dict[str, tuple[SegmentScore, str]] = {
    "centered": (
        _negated(_mean_abs(0, CART_LIMIT)),
        "−mean |x| / 2.4: the cart stays near the middle",
    ),
    "lively": (_mean_abs(1, 1.0), "mean |ẋ|: the cart moves (something happens)"),
    "calm": (_negated(_mean_abs(1, 1.0)), "−mean |ẋ|: the cart moves slowly"),
    "upright": (
        _negated(_mean_abs(2, POLE_LIMIT)),
        "−mean |θ| / 0.2095: the pole stays upright",
    ),
}

#: The built-in CartPole population.  "calm" in place of "lively" agrees too often with the
#: other two (all three worsen as an episode drifts) for its majority to cycle much.
CARTPOLE_GROUPS = ("centered", "lively", "upright")


def cartpole_population(temperature: float = 0.01) -> PopulationLabeler:
    """Three equal groups (centered, lively, upright), each preferring the segment that is
    better on its own criterion; with a small temperature each group is nearly certain and the
    population's P is close to a majority vote, which cycles on some triples of segments."""
    return PopulationLabeler(
        [
            AnnotatorGroup(name, CARTPOLE_CRITERIA[name][0], 1.0, temperature)
            for name in CARTPOLE_GROUPS
        ]
    )


POPULATIONS: dict[str, Callable[..., PopulationLabeler]] = {"cartpole": cartpole_population}


# --------------------------------------------------------------------------- by name


def _population(population: str = "cartpole", temperature: float = 0.01) -> PopulationLabeler:
    if population not in POPULATIONS:
        raise LabelerError(
            f"labeler option population={population!r}: choose from {', '.join(POPULATIONS)}"
        )
    if not (isinstance(temperature, int | float) and 0 < temperature < math.inf):
        raise LabelerError(f"labeler option temperature={temperature}: must be > 0")
    return POPULATIONS[population](float(temperature))


def make_labeler(name: str, **options: Any) -> ControlLabeler:
    """A labeler by name: ``oracle``, a B-Pref teacher (``noisy``, ``mistake``, ``skip``,
    ``myopic``, ``equal``; options override any :class:`Teacher` field) or ``population``
    (options ``population``, ``temperature``)."""
    if name == "population":
        allowed = ("population", "temperature")
    elif name in PRESETS:
        allowed = () if name == "oracle" else tuple(f.name for f in fields(Teacher))
    else:
        raise LabelerError(
            f"unknown labeler {name!r}: choose from {', '.join([*PRESETS, 'population'])}"
        )
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = ", ".join(allowed) or "none"
        raise LabelerError(f"labeler {name!r}: unknown option {unknown[0]!r} (options: {known})")
    if name == "population":
        return _population(**options)
    if name == "oracle":
        return Oracle()
    values = {**PRESETS[name], **options}
    for key, value in values.items():
        if not (isinstance(value, int | float) and not isinstance(value, bool)) and not (
            key == "scale" and value is None
        ):
            raise LabelerError(f"labeler option {key}={value!r}: must be a number")
    return Teacher(**{k: (v if v is None else float(v)) for k, v in values.items()})
