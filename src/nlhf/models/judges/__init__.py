"""Judges: one interface, P(a ≻ b | prompt) for a batch of comparisons, for every kind of judge.

    from nlhf.models.judges import load_judge, JudgeOptions
    judge = load_judge("vader")                              # or a folder, a URL, python:…
    p = judge(prompts, completions_a, completions_b)        # float32 tensor (B,), in [0, 1]

Every judge satisfies P(a ≻ b) + P(b ≻ a) = 1 and P(a ≻ a) = ½, runs without gradients,
and is what online trainers, ``nlhf eval`` and ``nlhf judge eval`` query.  The kinds:

- ``base``: the interface, ``ScoreJudge`` (a scalar score, which RLHF-PPO needs), VADER
  (``LexiconJudge``) and any Python function (``FunctionJudge``);
- ``trained``: folders of ``nlhf train reward-model|preference-model``;
- ``classifier``: any Hugging Face sequence classifier (a reward model's logit, or the
  probability of a named class);
- ``pairwise``: a causal LM that reads both responses and answers A or B, both orders
  averaged;
- ``remote``: a judge served by ``nlhf judge serve``;
- ``population``: annotator groups with different criteria, whose majority may cycle;
- ``cache``: any of them behind a cache of what was already judged;
- ``length``: any of them with a penalty per word of the completion;
- ``load``: ``load_judge(spec, options)`` and the ``judge_*`` command options.
"""

from nlhf.models.judges.base import (
    FunctionJudge,
    Judge,
    JudgeOptions,
    LexiconJudge,
    ScoreJudge,
)
from nlhf.models.judges.cache import CachedJudge, CachedScoreJudge, cached
from nlhf.models.judges.load import JUDGE_HELP, JudgeFields, load_judge
from nlhf.models.judges.trained import PreferenceModelJudge, RewardModelJudge

__all__ = [
    "JUDGE_HELP",
    "CachedJudge",
    "CachedScoreJudge",
    "FunctionJudge",
    "Judge",
    "JudgeFields",
    "JudgeOptions",
    "LexiconJudge",
    "PreferenceModelJudge",
    "RewardModelJudge",
    "ScoreJudge",
    "cached",
    "load_judge",
]
