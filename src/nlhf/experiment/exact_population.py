"""The exact population: the one a run names, its P on a prompt's completions, and the judges
of the controls (one criterion as a score judge, the Bradley–Terry reward fitted to its P).

    population = load_population(config)                        # the run's annotators
    scores = criterion_scores(population, prompts, texts)       # (G, N) float64
    P = exact_matrix(population, prompt, texts)                  # (K, K), P + Pᵀ = 1 exactly
    judge = CriterionJudge(population.groups[0])                 # P = σ((s(a) − s(b))/T)
    judge = AnchoredBradleyTerry(population, anchors)            # a score judge for PPO

:class:`AnchoredBradleyTerry` is how a Bradley–Terry fit of the *exact* population scores new
completions.  For a completion y of prompt x it takes the K reference completions of x that
were sampled and labelled in stage 1 (the anchors), builds the (K + 1)-item game of the exact
P on anchors ∪ {y}, fits the maximum-likelihood Bradley–Terry reward and returns r(y) minus
the anchors' mean reward.  Chosen over a reward model trained on exact soft labels because it
has no learning error (the control must separate learning the judge from optimizing it) and
needs no training; when P is a Bradley–Terry model (one group) it returns the true reward up
to a constant per prompt, and where the population cycles it returns the best scalar summary
of y's place among the anchors, which is what RLHF with unlimited exact labels would see.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from nlhf.errors import UserError
from nlhf.experiment.analysis import antisymmetric, population_matrix
from nlhf.models.judges import ScoreJudge
from nlhf.models.judges.load import population_judge
from nlhf.models.judges.population import AnnotatorGroup, PopulationJudge
from nlhf.tabular import fit_bradley_terry


def load_population(config: Any) -> PopulationJudge:
    """The population ``config.population`` names; one that cannot be built is a user error."""
    try:
        return population_judge(config.population)
    except UserError:
        raise
    except Exception as exc:  # a criterion that cannot be built (missing judge folder, …)
        raise UserError(f"population {config.population!r}: {exc}") from None


def criterion_scores(
    population: PopulationJudge, prompts: Sequence[str], texts: Sequence[str]
) -> np.ndarray:
    """(G, N): every group's criterion score of every (prompt, text)."""
    return np.stack(
        [g.criterion(list(prompts), list(texts)).double().cpu().numpy() for g in population.groups]
    )


def group_parameters(population: PopulationJudge) -> tuple[np.ndarray, np.ndarray]:
    """(weights, temperatures) of the groups."""
    weights = population.weights.double().numpy()
    return weights, np.array([g.temperature for g in population.groups], dtype=np.float64)


def exact_matrix(population: PopulationJudge, prompt: str, texts: Sequence[str]) -> np.ndarray:
    """The population's exact P(i ≻ j | prompt) over ``texts``, in float64."""
    scores = criterion_scores(population, [prompt] * len(texts), texts)
    return antisymmetric(population_matrix(scores, *group_parameters(population)))


class CriterionJudge(ScoreJudge):
    """One group of the population alone: its criterion is the score, 1/T the scale."""

    def __init__(self, group: AnnotatorGroup) -> None:
        super().__init__(1.0 / group.temperature)
        self.group = group
        self.name = group.name

    def scores(self, prompts, completions) -> torch.Tensor:
        return self.group.criterion(list(prompts), list(completions)).float().cpu()


class AnchoredBradleyTerry(ScoreJudge):
    """r(y) − mean r(anchors) of the Bradley–Terry fit of the exact P on anchors(x) ∪ {y}."""

    name = "bradley-terry-of-population"

    def __init__(self, population: PopulationJudge, anchors: dict[str, list[str]]) -> None:
        super().__init__(1.0)
        self.population = population
        self.anchors = anchors
        self.weights, self.temperatures = group_parameters(population)
        self._anchor_scores: dict[str, np.ndarray] = {}

    def _scores_of_anchors(self, prompt: str) -> np.ndarray:
        if prompt not in self._anchor_scores:
            if prompt not in self.anchors:
                raise UserError(
                    f"the Bradley–Terry control has no reference completions of the prompt "
                    f"{prompt[:60]!r}: it scores only the training prompts of stage 1"
                )
            texts = self.anchors[prompt]
            self._anchor_scores[prompt] = criterion_scores(
                self.population, [prompt] * len(texts), texts
            )
        return self._anchor_scores[prompt]

    def scores(self, prompts, completions) -> torch.Tensor:
        new = criterion_scores(self.population, prompts, completions)  # (G, B)
        out = []
        for b, prompt in enumerate(prompts):
            scores = np.concatenate([self._scores_of_anchors(prompt), new[:, b : b + 1]], axis=1)
            P = antisymmetric(population_matrix(scores, self.weights, self.temperatures))
            r = fit_bradley_terry(P)
            out.append(r[-1] - r[:-1].mean())
        return torch.tensor(out, dtype=torch.float32)
