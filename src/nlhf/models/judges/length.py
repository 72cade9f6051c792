"""A length penalty on any judge: longer completions lose ``per_word`` per word.

    from nlhf.models.judges.length import length_penalized
    judge = length_penalized(load_judge("vader"), per_word=0.01)    # or judge_length_penalty=

Preference optimization is known to lengthen completions (DNO's double after one iteration),
and a judge that likes length rewards it.  The penalty acts where the judge's preference is
made: a score judge's score becomes s(x, y) − c·words(y), so PPO's reward and the preference
σ(scale·(s − s′)) both see it; a pairwise judge's P becomes σ(logit P − c·(words(y) −
words(y′))), which is the same thing when P came from scores.  Both keep P(a ≻ b) + P(b ≻ a)
= 1 and P(a ≻ a) = ½.  Words are whitespace-separated pieces of the completion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from nlhf.models.judges.base import Judge, ScoreJudge, check


def words(texts: Sequence[str]) -> torch.Tensor:
    return torch.tensor([float(len(t.split())) for t in texts])


class _Penalized:
    judge: Any
    per_word: float

    def __getattr__(self, name: str) -> Any:  # definition, model, … of the judge inside
        if name in ("judge", "per_word"):
            raise AttributeError(name)
        return getattr(self.judge, name)


class LengthPenalizedScores(_Penalized, ScoreJudge):
    """A score judge whose score loses ``per_word`` per word of the completion."""

    def __init__(self, judge: ScoreJudge, per_word: float) -> None:
        self.judge, self.per_word = judge, float(per_word)
        ScoreJudge.__init__(self, judge.scale)

    def scores(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        s = self.judge.scores(prompts, completions).float().cpu()
        return s - self.per_word * words(completions)


class LengthPenalizedJudge(_Penalized):
    """A pairwise judge whose logit of P(a ≻ b) loses ``per_word`` per extra word of a."""

    def __init__(self, judge: Judge, per_word: float) -> None:
        self.judge, self.per_word = judge, float(per_word)

    @torch.no_grad()
    def __call__(self, prompts, a, b) -> torch.Tensor:
        check(prompts, a, b)
        p = self.judge(prompts, a, b).float().cpu().clamp(1e-6, 1 - 1e-6)
        return torch.sigmoid(torch.logit(p) - self.per_word * (words(a) - words(b)))


def length_penalized(judge: Judge, per_word: float) -> Judge:
    """``judge`` with the penalty (itself when ``per_word`` is 0)."""
    if not per_word:
        return judge
    if isinstance(judge, ScoreJudge):
        return LengthPenalizedScores(judge, per_word)
    return LengthPenalizedJudge(judge, per_word)
