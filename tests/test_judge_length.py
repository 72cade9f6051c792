"""The length penalty (``judge_length_penalty``): on a score judge it comes off the score (so
PPO's reward sees it), on a pairwise judge off the logit of P; both stay antisymmetric and ½
against themselves, and equal lengths change nothing."""

import pytest
import torch

from nlhf.models.judges import FunctionJudge, JudgeOptions, ScoreJudge, load_judge
from nlhf.models.judges.length import length_penalized


class Pairwise:
    """A judge that is not a score judge: prefers completions with more 'a's."""

    def __call__(self, prompts, a, b):
        d = torch.tensor([x.count("a") - y.count("a") for x, y in zip(a, b, strict=True)])
        return torch.sigmoid(d.float())


A = ["a a", "b", "a b c d e", "x"]
B = ["b b b", "a", "a", "x"]
P = ["p"] * 4


@pytest.mark.parametrize("kind", ["score", "pairwise"])
def test_the_penalty_is_antisymmetric_and_shifts_the_logit_by_the_word_gap(kind):
    inner = FunctionJudge(lambda p, y: y.count("a")) if kind == "score" else Pairwise()
    judge = length_penalized(inner, per_word=0.3)
    assert isinstance(judge, ScoreJudge) == (kind == "score")
    p, q = judge(P, A, B), judge(P, B, A)
    torch.testing.assert_close(p + q, torch.ones(4))
    torch.testing.assert_close(judge(P, A, A), torch.full((4,), 0.5))
    gap = torch.tensor([len(a.split()) - len(b.split()) for a, b in zip(A, B, strict=True)])
    shift = torch.logit(inner(P, A, B)) - torch.logit(p)
    torch.testing.assert_close(shift, 0.3 * gap.float(), atol=1e-4, rtol=0)
    assert p[3] == pytest.approx(0.5)  # equal lengths, equal texts


def test_a_score_judge_loses_the_penalty_from_its_scores_and_loads_by_option():
    judge = load_judge("vader", JudgeOptions(length_penalty=0.05, cache=False))
    plain = load_judge("vader", JudgeOptions(cache=False))
    texts = ["good", "good good good good"]
    drop = plain.scores(P[:2], texts) - judge.scores(P[:2], texts)
    torch.testing.assert_close(drop, torch.tensor([0.05, 0.20]))
    assert length_penalized(plain, 0.0) is plain


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 1e308, -101.0])
def test_a_non_finite_or_absurd_penalty_is_refused_when_the_config_is_made(value):
    from nlhf.judge.serve_cli import Config

    with pytest.raises(ValueError, match=r"judge_length_penalty must be in \[-100, 100\]"):
        Config(judge_length_penalty=value)
    assert Config(judge_length_penalty=-100.0).judge_length_penalty == -100.0
