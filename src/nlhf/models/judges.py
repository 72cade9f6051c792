"""Judges: one interface that returns P(a ≻ b | prompt) for a batch of comparisons.

    judge = RewardModelJudge(RewardModel.load("runs/rm"))
    judge = PreferenceModelJudge(PreferenceModel.load("runs/pm"))
    judge = LexiconJudge()                           # VADER sentiment, no training
    judge = FunctionJudge(lambda prompt, text: text.count("!"), scale=2.0)
    p = judge(prompts, completions_a, completions_b)   # float32 tensor (B,), in [0, 1]

Every judge satisfies P(a ≻ b) + P(b ≻ a) = 1 (up to float rounding) and P(a ≻ a) = ½.
Judges run without gradients and in eval mode; they are what online algorithms query.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch

from nlhf.models.errors import ModelError
from nlhf.models.preference_model import PreferenceModel
from nlhf.models.reward_model import KIND_FILE, RewardModel, read_kind


class Judge(Protocol):
    def __call__(
        self, prompts: Sequence[str], a: Sequence[str], b: Sequence[str]
    ) -> torch.Tensor: ...


def _check(prompts: Sequence[str], a: Sequence[str], b: Sequence[str]) -> None:
    if not len(prompts) == len(a) == len(b):
        raise ValueError(f"judge got {len(prompts)} prompts, {len(a)} and {len(b)} completions")


class ScoreJudge:
    """P(a ≻ b) = σ(scale·(s(a) − s(b))) for a scalar score s(prompt, completion)."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def scores(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def __call__(self, prompts, a, b) -> torch.Tensor:
        _check(prompts, a, b)
        n = len(prompts)
        s = self.scores(list(prompts) * 2, list(a) + list(b)).float().cpu()
        return torch.sigmoid(self.scale * (s[:n] - s[n:]))


class RewardModelJudge(ScoreJudge):
    """σ(r(x, a) − r(x, b)) from a Bradley–Terry reward model."""

    def __init__(self, model: RewardModel, batch_size: int = 64) -> None:
        super().__init__(1.0)
        self.model = model.eval()
        self.batch_size = batch_size

    def scores(self, prompts, completions) -> torch.Tensor:
        return torch.cat(
            [
                self.model.score(
                    prompts[i : i + self.batch_size], completions[i : i + self.batch_size]
                )
                for i in range(0, len(prompts), self.batch_size)
            ]
        )


class LexiconJudge(ScoreJudge):
    """VADER compound sentiment (in [−1, 1]) as the score: a cheap, training-free "human"."""

    def __init__(self, scale: float = 5.0, polarity: Callable[[str], dict] | None = None) -> None:
        super().__init__(scale)
        if polarity is None:
            from nlhf.assets import vader

            polarity = vader()
        self.polarity = polarity

    def scores(self, prompts, completions) -> torch.Tensor:
        return torch.tensor([self.polarity(text)["compound"] for text in completions])


class FunctionJudge(ScoreJudge):
    """Any Python function ``score(prompt, completion) -> float``."""

    def __init__(self, score: Callable[[str, str], float], scale: float = 1.0) -> None:
        super().__init__(scale)
        self.score = score

    def scores(self, prompts, completions) -> torch.Tensor:
        return torch.tensor(
            [float(self.score(p, c)) for p, c in zip(prompts, completions, strict=True)]
        )


class PreferenceModelJudge:
    """P(a ≻ b | x) from a pairwise preference model."""

    def __init__(self, model: PreferenceModel, batch_size: int = 64) -> None:
        self.model = model.eval()
        self.batch_size = batch_size

    @torch.no_grad()
    def __call__(self, prompts, a, b) -> torch.Tensor:
        _check(prompts, a, b)
        step = self.batch_size
        return torch.cat(
            [
                self.model.prob(prompts[i : i + step], a[i : i + step], b[i : i + step])
                .float()
                .cpu()
                for i in range(0, len(prompts), step)
            ]
        )


def load_judge(spec: str) -> Judge:
    """A judge from a folder written by ``nlhf train reward-model|preference-model``, or
    ``vader`` for the lexicon judge."""
    if spec == "vader":
        return LexiconJudge()
    if not Path(spec).exists():
        raise ModelError(
            f"{spec}: no such judge folder (a judge is vader or a folder from nlhf train "
            "reward-model|preference-model)"
        )
    kind = read_kind(Path(spec)).get("kind")
    if kind == "reward-model":
        return RewardModelJudge(RewardModel.load(spec))
    if kind == "preference-model":
        return PreferenceModelJudge(PreferenceModel.load(spec))
    raise ModelError(
        f"{spec}: unknown judge kind {kind!r} in {KIND_FILE} (expected reward-model or "
        "preference-model)"
    )
