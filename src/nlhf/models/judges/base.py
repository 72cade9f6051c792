"""The judge interface and the judges that need no model: VADER and any Python function.

A judge answers P(a ≻ b | prompt) for a batch of comparisons, as a float32 CPU tensor (B,)
in [0, 1], with P(a ≻ b) + P(b ≻ a) = 1 and P(a ≻ a) = ½.  A *score judge* (a subclass of
:class:`ScoreJudge`) also gives a scalar score s(prompt, completion) and compares with
σ(scale·(s(a) − s(b))); RLHF-PPO needs one, Nash trainers take any judge.

    judge = LexiconJudge()                                  # VADER compound sentiment
    judge = FunctionJudge(lambda prompt, text: text.count("!"), scale=2.0)
    p = judge(prompts, completions_a, completions_b)
    s = judge.scores(prompts, completions)                  # score judges only

``JudgeOptions`` are the knobs every model judge reads (device, dtype, batch size, how the
text is formatted); ``nlhf.models.judges.load_judge`` builds a judge from a spec string.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from nlhf.assets import vader


class Judge(Protocol):
    def __call__(
        self, prompts: Sequence[str], a: Sequence[str], b: Sequence[str]
    ) -> torch.Tensor: ...


@dataclass(frozen=True)
class JudgeOptions:
    """How a model judge runs and reads its input (the ``judge_*`` options of a command)."""

    device: str = "cpu"  # cpu, cuda, cuda:1, mps, or auto (the first accelerator, else cpu)
    dtype: str = "float32"  # float32, bfloat16, float16
    batch_size: int = 32
    max_length: int = 512  # tokens per input; longer inputs lose the start of the prompt
    label: str = ""  # a classifier's class whose probability is the score (name or index)
    separator: str = "\n"  # between prompt and completion when a model has no chat template
    completion_only: bool = False  # score the completion alone (e.g. a sentiment classifier)
    template: str = ""  # a pairwise LM judge's prompt: {prompt}, {a}, {b}; empty: the default
    answers: str = "A,B"  # a pairwise LM judge's two answer strings: first wins, second wins
    token: str = ""  # a judge server's token (needed beyond loopback)
    cache: bool = True  # remember judged comparisons (and scores) instead of recomputing
    length_penalty: float = 0.0  # per word: off the score, or off the logit of a pairwise P

    def torch_device(self) -> torch.device:
        if self.device != "auto":
            return torch.device(self.device)
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")


DEFAULTS = JudgeOptions()


def check(prompts: Sequence[str], a: Sequence[str], b: Sequence[str]) -> None:
    if not len(prompts) == len(a) == len(b):
        raise ValueError(f"judge got {len(prompts)} prompts, {len(a)} and {len(b)} completions")


def by_length(texts: Sequence[str], batch_size: int) -> list[list[int]]:
    """Indices of ``texts`` in batches of similar length (less padding), longest first."""
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def in_batches(
    fn: Callable[[list[int]], torch.Tensor], texts: Sequence[str], batch_size: int
) -> torch.Tensor:
    """``fn(indices)`` over length-sorted batches of ``texts``, put back in input order."""
    out = torch.empty(len(texts), dtype=torch.float32)
    for batch in by_length(texts, batch_size):
        out[torch.tensor(batch, dtype=torch.long)] = fn(batch).float().cpu()
    return out


class ScoreJudge:
    """P(a ≻ b) = σ(scale·(s(a) − s(b))) for a scalar score s(prompt, completion)."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def scores(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def __call__(self, prompts, a, b) -> torch.Tensor:
        check(prompts, a, b)
        n = len(prompts)
        s = self.scores(list(prompts) * 2, list(a) + list(b)).float().cpu()
        return torch.sigmoid(self.scale * (s[:n] - s[n:]))


# VADER strips a word of punctuation alone by trying each shorter prefix against its lexicon,
# quadratic in the word's length.  No lexicon entry is longer than 64 characters, so a longer
# such word is cut there, keeping up to four of the "!" and "?" it loses (VADER's emphasis
# counts four at most): the score is the same, in linear time.
_PUNCTUATION = re.escape(string.punctuation + "’ʼ‘")  # and the apostrophes VADER maps to '
_PUNCTUATION_WORD = re.compile(rf"(?<!\S)[{_PUNCTUATION}]{{65,}}(?!\S)")


def _cut(word: re.Match) -> str:
    rest = word[0][64:]
    return word[0][:64] + "!" * min(4, rest.count("!")) + "?" * min(4, rest.count("?"))


class LexiconJudge(ScoreJudge):
    """VADER compound sentiment (in [−1, 1]) as the score: a cheap, training-free "human"."""

    def __init__(self, scale: float = 5.0, polarity: Callable[[str], dict] | None = None) -> None:
        super().__init__(scale)
        if polarity is None:
            polarity = vader()
        self.polarity = polarity

    def scores(self, prompts, completions) -> torch.Tensor:
        return torch.tensor(
            [self.polarity(_PUNCTUATION_WORD.sub(_cut, text))["compound"] for text in completions]
        )


class FunctionJudge(ScoreJudge):
    """Any Python function ``score(prompt, completion) -> float``."""

    def __init__(self, score: Callable[[str, str], float], scale: float = 1.0) -> None:
        super().__init__(scale)
        self.score = score

    def scores(self, prompts, completions) -> torch.Tensor:
        return torch.tensor(
            [float(self.score(p, c)) for p, c in zip(prompts, completions, strict=True)]
        )
