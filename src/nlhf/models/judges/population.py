"""A population of annotators as a judge: groups with different criteria, whose majority may cycle.

    judge = load_judge("population:default")               # positivity, brevity, vocabulary
    judge = load_judge("population:crowd.yaml")             # your own groups
    judge = PopulationJudge([AnnotatorGroup("short", brevity, weight=2, temperature=0.5), ...])
    p = judge(prompts, a, b)                                # the population's P(a ≻ b | x)
    rows = judge.sample_labels(prompts, a, b, rng)          # one drawn annotator per pair

An annotator group has a criterion s(prompt, completion), a weight and a temperature T; its
members prefer y to y′ with probability σ((s(y) − s(y′))/T).  The population's P(y ≻ y′ | x) is
the weighted mean over groups (:func:`population_preference`, the one formula that the
segment population of ``nlhf.control.labelers`` and the experiment's exact matrices use too):
antisymmetric, ½ against itself, and not transitive in general (three groups that rank three
completions in the three rotations of one order make a majority cycle no reward can
represent).  ``sample_labels`` collects labels as a real study would: for each pair one
annotator, drawn with the groups' weights, makes a binary choice (``annotators=k``: k of them,
each a row).  Rows use the schema of ``nlhf label export``.  A definition (YAML or a dict) of
the groups, with built-in (``CRITERIA``), Python or score-judge criteria, is read by
:func:`nlhf.models.judges.load.population_judge`.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nlhf.assets import vader
from nlhf.config import Checked
from nlhf.models.errors import ModelError
from nlhf.models.judges.base import check

Criterion = Callable[[Sequence[str], Sequence[str]], torch.Tensor]  # batch → scores (B,)

WORD = re.compile(r"[a-z']+")
STOP = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been it its "
    "this that these those i you he she we they me my your his her our their not no so very "
    "just than then there here what which who whom how all any some more most can will would "
    "could should do does did has have had".split()
)
FILM = frozenset(
    "film films movie movies actor actors actress acting cast scene scenes plot story script "
    "director directed direction performance performances screen cinema camera character "
    "characters dialogue drama comedy thriller soundtrack ending sequel".split()
)


def _per_text(fn: Callable[[str], float]) -> Criterion:
    return lambda prompts, texts: torch.tensor([fn(t) for t in texts], dtype=torch.float32)


def _words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def _vader() -> Criterion:
    polarity = vader()
    return _per_text(lambda t: polarity(t)["compound"])


CRITERIA: dict[str, tuple[Callable[[], Criterion], str]] = {
    "positivity": (_vader, "VADER compound sentiment, in [−1, 1]"),
    "brevity": (lambda: _per_text(lambda t: -len(_words(t)) / 20), "minus words / 20"),
    "vocabulary": (
        lambda: _per_text(lambda t: len({w for w in _words(t) if w not in STOP}) / 10),
        "distinct content words / 10",
    ),
    "film_words": (
        lambda: _per_text(lambda t: sum(w in FILM for w in _words(t)) / 2),
        "film vocabulary words / 2",
    ),
    "exclamations": (lambda: _per_text(lambda t: t.count("!") / 2), "exclamation marks / 2"),
}

DEFAULT = {
    "groups": [
        {"name": "enthusiasts", "criterion": "positivity", "weight": 1.0, "temperature": 0.1},
        {"name": "skimmers", "criterion": "brevity", "weight": 1.0, "temperature": 0.1},
        {"name": "critics", "criterion": "vocabulary", "weight": 1.0, "temperature": 0.1},
    ]
}


@dataclass(frozen=True)
class AnnotatorGroup(Checked):
    """Annotators who share a criterion; they prefer y to y′ w.p. σ((s(y) − s(y′))/T).

    ``criterion`` scores completions for :class:`PopulationJudge`; other populations put their
    own score function here (``nlhf.control.labelers`` scores trajectory segments)."""

    name: str
    criterion: Criterion | Callable[..., Any]
    weight: float = 1.0
    temperature: float = 1.0

    def check(self) -> None:
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ModelError(f"population group {self.name!r}: weight must be > 0")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ModelError(f"population group {self.name!r}: temperature must be > 0")


def group_weights(groups: Sequence[AnnotatorGroup]) -> np.ndarray:
    """The groups' weights normalized to sum 1; no group, or a name used twice, is an error."""
    if not groups:
        raise ModelError("a population needs at least one group")
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise ModelError(f"population group names repeat: {names}")
    total = sum(g.weight for g in groups)
    return np.array([g.weight / total for g in groups], dtype=np.float64)


def group_preferences(scores_a: np.ndarray, scores_b: np.ndarray, temperatures) -> np.ndarray:
    """(G, ...): each group's P(a ≻ b) = σ((s_g(a) − s_g(b))/T_g) from (G, ...) scores."""
    gaps = np.asarray(scores_a, np.float64) - np.asarray(scores_b, np.float64)
    t = np.asarray(temperatures, np.float64).reshape(-1, *[1] * (gaps.ndim - 1))
    return 0.5 * (1.0 + np.tanh(0.5 * (gaps / t)))  # σ, with no overflow for large gaps


def population_preference(
    scores_a: np.ndarray, scores_b: np.ndarray, weights, temperatures
) -> np.ndarray:
    """P(a ≻ b) = Σ_g w_g σ((s_g(a) − s_g(b))/T_g) with the weights normalized to sum 1, from
    the groups' (G, ...) scores of both sides: the population's preference, (...)."""
    w = np.asarray(weights, np.float64)
    return np.tensordot(w / w.sum(), group_preferences(scores_a, scores_b, temperatures), 1)


class PopulationJudge:
    """The judge of a population of annotator groups (:func:`population_preference`)."""

    def __init__(
        self, groups: Sequence[AnnotatorGroup], definition: dict[str, Any] | None = None
    ) -> None:
        self.groups = list(groups)
        self.weights = torch.from_numpy(group_weights(self.groups))
        self.temperatures = np.array([g.temperature for g in self.groups], dtype=np.float64)
        self.definition = definition or {
            "groups": [
                {
                    "name": g.name,
                    "criterion": "python",
                    "weight": g.weight,
                    "temperature": g.temperature,
                }
                for g in groups
            ]
        }

    def _scores(self, prompts, a, b) -> tuple[np.ndarray, np.ndarray]:
        """((G, B), (G, B)): every group's criterion scores of a and of b."""
        check(prompts, a, b)
        n = len(prompts)
        s = [g.criterion(list(prompts) * 2, list(a) + list(b)).double().cpu() for g in self.groups]
        both = torch.stack(s).numpy()
        return both[:, :n], both[:, n:]

    def group_probs(self, prompts, a, b) -> np.ndarray:
        """(G, B): each group's P(a ≻ b | x)."""
        return group_preferences(*self._scores(prompts, a, b), self.temperatures)

    def __call__(self, prompts, a, b) -> torch.Tensor:
        p = population_preference(*self._scores(prompts, a, b), self.weights, self.temperatures)
        return torch.from_numpy(p).float()

    def sample_labels(
        self,
        prompts: Sequence[str],
        a: Sequence[str],
        b: Sequence[str],
        rng: random.Random,
        annotators: int = 1,
        source: str = "population",
    ) -> list[dict[str, Any]]:
        """Preference rows as collected: per pair, ``annotators`` draws of a group (by weight),
        each choosing a over b with its group's probability."""
        probs = self.group_probs(prompts, a, b).tolist()
        weights = self.weights.tolist()
        rows = []
        for i, (x, y, z) in enumerate(zip(prompts, a, b, strict=True)):
            for _ in range(annotators):
                g = rng.choices(range(len(self.groups)), weights)[0]
                first = rng.random() < probs[g][i]
                rows.append(
                    {
                        "prompt": x,
                        "chosen": y if first else z,
                        "rejected": z if first else y,
                        "weight": 1.0,
                        "source": source,
                        "labeler": self.groups[g].name,
                    }
                )
        return rows
