"""Judges from folders written by ``nlhf train reward-model`` and ``nlhf train preference-model``.

    judge = RewardModelJudge(RewardModel.load("runs/rm/model"))       # σ(r(x, a) − r(x, b))
    judge = PreferenceModelJudge(PreferenceModel.load("runs/pm/model"))  # P(a ≻ b | x)

Both run without gradients on the device of their model, in batches of similar length.
"""

from __future__ import annotations

from pathlib import Path

import torch

from nlhf.models.errors import ModelError
from nlhf.models.judges.base import JudgeOptions, ScoreJudge, check, in_batches
from nlhf.models.lm import DTYPES
from nlhf.models.preference_model import PreferenceModel
from nlhf.models.reward_model import KIND_FILE, RewardModel, read_kind


class RewardModelJudge(ScoreJudge):
    """σ(r(x, a) − r(x, b)) from a Bradley–Terry reward model."""

    def __init__(self, model: RewardModel, batch_size: int = 64) -> None:
        super().__init__(1.0)
        self.model = model.eval()
        self.batch_size = batch_size

    @torch.no_grad()
    def scores(self, prompts, completions) -> torch.Tensor:
        prompts, completions = list(prompts), list(completions)

        def score(rows: list[int]) -> torch.Tensor:
            return self.model.score([prompts[i] for i in rows], [completions[i] for i in rows])

        texts = [p + c for p, c in zip(prompts, completions, strict=True)]
        return in_batches(score, texts, self.batch_size)


class PreferenceModelJudge:
    """P(a ≻ b | x) from a pairwise preference model (antisymmetric by construction)."""

    def __init__(self, model: PreferenceModel, batch_size: int = 64) -> None:
        self.model = model.eval()
        self.batch_size = batch_size

    @torch.no_grad()
    def __call__(self, prompts, a, b) -> torch.Tensor:
        check(prompts, a, b)
        prompts, a, b = list(prompts), list(a), list(b)

        def prob(rows: list[int]) -> torch.Tensor:
            return self.model.prob(
                [prompts[i] for i in rows], [a[i] for i in rows], [b[i] for i in rows]
            )

        texts = [p + x + y for p, x, y in zip(prompts, a, b, strict=True)]
        return in_batches(prob, texts, self.batch_size)


def trained_judge(folder: Path, options: JudgeOptions) -> RewardModelJudge | PreferenceModelJudge:
    """The judge in a folder written by ``nlhf train reward-model|preference-model``."""
    kind = read_kind(folder).get("kind")
    place = {"device": options.torch_device(), "dtype": DTYPES[options.dtype]}
    if kind == "reward-model":
        return RewardModelJudge(RewardModel.load(folder).to(**place), options.batch_size)
    if kind == "preference-model":
        return PreferenceModelJudge(PreferenceModel.load(folder).to(**place), options.batch_size)
    raise ModelError(
        f"{folder}: unknown judge kind {kind!r} in {KIND_FILE} (expected reward-model or "
        "preference-model)"
    )
