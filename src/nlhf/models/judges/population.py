"""A population of annotators as a judge: groups with different criteria, whose majority may cycle.

    judge = load_judge("population:default")               # positivity, brevity, vocabulary
    judge = load_judge("population:crowd.yaml")             # your own groups
    judge = PopulationJudge([Group("short", brevity, weight=2, temperature=0.5), ...])
    p = judge(prompts, a, b)                                # the population's P(a ≻ b | x)
    rows = judge.sample_labels(prompts, a, b, rng)          # one drawn annotator per pair

A group has a criterion s(prompt, completion), a weight and a temperature T; its members
prefer y to y′ with probability σ((s(y) − s(y′))/T).  The population's P(y ≻ y′ | x) is the
weighted mean over groups: antisymmetric, ½ against itself, and not transitive in general
(three groups that rank three completions in the three rotations of one order make a
majority cycle no reward can represent).  ``sample_labels`` collects labels as a real study
would: for each pair one annotator, drawn with the groups' weights, makes a binary choice
(``annotators=k``: k of them, each a row).  Rows use the schema of ``nlhf label export``.

A definition (YAML or a dict) names each group's criterion: a built-in (``CRITERIA``:
``positivity``, ``brevity``, ``vocabulary``, ``film_words``, ``exclamations``), a
``python:module:function``, or a score judge's spec (a reward-model folder, ``vader``, …).
``definition`` is what runs record in their config.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

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
    from nlhf.assets import vader

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
class Group:
    """Annotators who share a criterion; they prefer y to y′ w.p. σ((s(y) − s(y′))/T).

    ``criterion`` scores completions for :class:`PopulationJudge`; other populations put their
    own score function here (``nlhf.control.labelers`` scores trajectory segments)."""

    name: str
    criterion: Criterion | Callable[..., Any]
    weight: float = 1.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if not (self.weight > 0 and math.isfinite(self.weight)):
            raise ModelError(f"population group {self.name!r}: weight must be > 0")
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise ModelError(f"population group {self.name!r}: temperature must be > 0")


def criterion(spec: str) -> Criterion:
    """A built-in criterion, ``python:module:function`` or a score judge's spec."""
    if spec in CRITERIA:
        return CRITERIA[spec][0]()
    from nlhf.models.judges.base import FunctionJudge, ScoreJudge
    from nlhf.models.judges.load import build_judge, python_judge

    if spec.startswith("python:"):
        fn: FunctionJudge = python_judge(spec)
        return fn.scores
    from nlhf.models.judges.base import JudgeOptions

    judge = build_judge(spec, JudgeOptions(cache=False))
    if not isinstance(judge, ScoreJudge):
        raise ModelError(f"criterion {spec!r}: a criterion needs a score judge, not a pairwise one")
    return judge.scores


class PopulationJudge:
    """P(a ≻ b | x) = Σ_g w_g σ((s_g(a) − s_g(b))/T_g) with Σ_g w_g = 1."""

    def __init__(self, groups: Sequence[Group], definition: dict[str, Any] | None = None) -> None:
        if not groups:
            raise ModelError("a population needs at least one group")
        names = [g.name for g in groups]
        if len(set(names)) != len(names):
            raise ModelError(f"population group names repeat: {names}")
        self.groups = list(groups)
        total = sum(g.weight for g in groups)
        self.weights = torch.tensor([g.weight / total for g in groups], dtype=torch.float64)
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

    @classmethod
    def from_definition(
        cls, definition: dict[str, Any], where: str = "population"
    ) -> PopulationJudge:
        groups_in = definition.get("groups") if isinstance(definition, dict) else None
        if not isinstance(groups_in, list) or not groups_in:
            raise ModelError(
                f"{where}: needs a list 'groups' of name, criterion, weight, temperature"
            )
        groups = []
        for i, g in enumerate(groups_in):
            if not isinstance(g, dict) or "criterion" not in g:
                raise ModelError(f"{where}: groups[{i}] needs a 'criterion'")
            unknown = set(g) - {"name", "criterion", "weight", "temperature"}
            if unknown:
                raise ModelError(f"{where}: groups[{i}]: unknown field(s) {sorted(unknown)}")
            try:
                weight, temperature = float(g.get("weight", 1.0)), float(g.get("temperature", 1.0))
            except (TypeError, ValueError):
                raise ModelError(
                    f"{where}: groups[{i}]: weight and temperature are numbers"
                ) from None
            groups.append(
                Group(
                    str(g.get("name", g["criterion"])),
                    criterion(str(g["criterion"])),
                    weight,
                    temperature,
                )
            )
        return cls(groups, definition)

    @classmethod
    def load(cls, spec: str) -> PopulationJudge:
        """``default`` or a YAML file with ``groups``."""
        if spec == "default":
            return cls.from_definition(DEFAULT, "population:default")
        path = Path(spec)
        if not path.is_file():
            raise ModelError(f"population:{spec}: no such file (or give population:default)")
        import yaml

        try:
            definition = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ModelError(f"{spec}: not a readable YAML population ({exc})") from None
        return cls.from_definition(definition, spec)

    def group_probs(self, prompts, a, b) -> torch.Tensor:
        """(G, B): each group's P(a ≻ b | x)."""
        check(prompts, a, b)
        n = len(prompts)
        rows = []
        for g in self.groups:
            s = g.criterion(list(prompts) * 2, list(a) + list(b)).double().cpu()
            rows.append(torch.sigmoid((s[:n] - s[n:]) / g.temperature))
        return torch.stack(rows)

    def __call__(self, prompts, a, b) -> torch.Tensor:
        return (self.weights[:, None] * self.group_probs(prompts, a, b)).sum(0).float()

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
