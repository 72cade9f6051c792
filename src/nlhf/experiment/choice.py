"""The forced choice of ``nlhf experiment decoy`` and ``cycle``: one question, its answer begun,
a completion's type read from its first words, and the exact judges of the controls.

    text = render_question(tokenizer)          # chat template + "My favourite colour is"
    t = completion_type(" blue, because", ("blue", "green", "red"))     # 0; "other" is K
    counts = type_counts(texts, options)       # (K + 1,) completions of each type
    judge = TypePreference(P, options)         # P(a ≻ b) = P[type(a), type(b)]
    judge = TypeReward(reward, options)        # a score judge: s(y) = r[type(y)]

A completion is of type k when option k is the only option it names (whole words, any case);
one that names none or several is ``other``.  The question asks for a favourite among three
colours with the answer begun, so that a reply of a few tokens names one: asked with the
chat template and "My favourite colour is", SmolLM2 names every colour at temperature 1,
while asked for one word without the begun answer few replies name a colour (issue 27).
The two judges have no learning error: the controls train against the population itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from nlhf.data.chat import has_chat_template
from nlhf.models.judges import ScoreJudge
from nlhf.models.judges.base import check

QUESTION = "Which colour do you like best: red, blue or green?"
ANSWER = "My favourite colour is"


def render_question(tokenizer: Any) -> str:
    """The question as the policy reads it: its chat template's user turn and the assistant's
    turn begun with :data:`ANSWER` (plain "Human:/Assistant:" text without a template)."""
    messages = [{"role": "user", "content": QUESTION}]
    if has_chat_template(tokenizer):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return f"{text}{ANSWER}"
    return f"Human: {QUESTION}\n\nAssistant: {ANSWER}"


def completion_type(text: str, options: Sequence[str]) -> int:
    """The index of the only option ``text`` names, else ``len(options)`` (other)."""
    named = {
        k for k, name in enumerate(options) if re.search(rf"\b{re.escape(name)}\b", text, re.I)
    }
    return named.pop() if len(named) == 1 else len(options)


def type_counts(texts: Sequence[str], options: Sequence[str]) -> np.ndarray:
    """How many of ``texts`` are of each type (the options, then other)."""
    counts = np.zeros(len(options) + 1, dtype=np.int64)
    for text in texts:
        counts[completion_type(text, options)] += 1
    return counts


class TypePreference:
    """The population's exact P between completion types: P(a ≻ b) = P[type(a), type(b)]."""

    name = "exact-population"

    def __init__(self, P: np.ndarray, options: Sequence[str]) -> None:
        self.P, self.options = np.asarray(P, dtype=np.float64), tuple(options)

    @torch.no_grad()
    def __call__(self, prompts, a, b) -> torch.Tensor:
        check(prompts, a, b)
        i = [completion_type(t, self.options) for t in a]
        j = [completion_type(t, self.options) for t in b]
        return torch.tensor(self.P[i, j], dtype=torch.float32)


class TypeReward(ScoreJudge):
    """The Bradley–Terry fit of the exact P on the pairs as drawn, as a score per type."""

    name = "exact-bradley-terry"

    def __init__(self, reward: Sequence[float], options: Sequence[str]) -> None:
        super().__init__(1.0)
        self.reward, self.options = np.asarray(reward, dtype=np.float64), tuple(options)

    def scores(self, prompts, completions) -> torch.Tensor:
        kinds = [completion_type(t, self.options) for t in completions]
        return torch.tensor(self.reward[kinds], dtype=torch.float32)
