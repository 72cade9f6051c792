"""Any Hugging Face sequence classifier as a judge: a reward model, or a class's probability.

    judge = SequenceClassifierJudge.load("path/to/reward-model")            # one logit
    judge = SequenceClassifierJudge.load("path/to/sentiment", JudgeOptions(label="POSITIVE",
                                         completion_only=True))           # P(class) as score

One output: the logit is a reward r(x, y) and P(a ≻ b) = σ(r(a) − r(b)).  Several outputs:
the softmax probability of the class named by ``label`` (its name in ``id2label``, any case,
or its index; ``POSITIVE`` is taken when present and nothing is named) is the score, and
P(a ≻ b) = σ(10·(p(a) − p(b))).  The input is the prompt and completion as the model expects
them: its chat template when the tokenizer has one (a user turn, then an assistant turn),
else ``prompt + separator + completion``, or the completion alone with ``completion_only``
(the classic sentiment pipeline).  Inputs longer than ``max_length`` lose the start.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from nlhf.models.errors import ModelError, loading
from nlhf.models.judges.base import DEFAULTS, JudgeOptions, ScoreJudge, in_batches
from nlhf.models.lm import DTYPES

PROBABILITY_SCALE = 10.0  # σ(10·Δp): a full swing of the class probability is near-certain


def class_index(config, label: str) -> int:
    """The index of ``label`` (a name in ``config.id2label`` or a number) among the outputs."""
    names = {int(i): str(n) for i, n in (config.id2label or {}).items()}
    if label.strip().isdigit() and int(label) < config.num_labels:
        return int(label)
    wanted = label.strip().lower() or "positive"
    for index, name in names.items():
        if name.lower() == wanted:
            return index
    raise ModelError(
        f"judge_label {label!r}: no such class; the classes are "
        + ", ".join(f"{i}={n}" for i, n in sorted(names.items()))
        + " (give a name or an index)"
    )


class SequenceClassifierJudge(ScoreJudge):
    """A sequence classifier's logit (one output) or class probability (several) as a score."""

    def __init__(self, model, tokenizer, options: JudgeOptions = DEFAULTS) -> None:
        self.model, self.tokenizer, self.options = model.eval(), tokenizer, options
        outputs = model.config.num_labels
        self.index = None if outputs == 1 else class_index(model.config, options.label)
        super().__init__(1.0 if self.index is None else PROBABILITY_SCALE)
        tokenizer.truncation_side = "left"
        tokenizer.padding_side = "right"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        if model.config.pad_token_id is None:
            model.config.pad_token_id = tokenizer.pad_token_id
        self.templated = bool(getattr(tokenizer, "chat_template", None)) and not (
            options.completion_only
        )

    @classmethod
    def load(cls, where: str | Path, options: JudgeOptions = DEFAULTS) -> SequenceClassifierJudge:
        with loading(where, "a sequence classifier"):
            tokenizer = AutoTokenizer.from_pretrained(str(where))
            model = AutoModelForSequenceClassification.from_pretrained(
                str(where), dtype=DTYPES[options.dtype]
            )
        return cls(model.to(options.torch_device()), tokenizer, options)

    def text(self, prompt: str, completion: str) -> str:
        if self.options.completion_only:
            return completion
        if self.templated:
            turns = [
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": completion},
            ]
            return self.tokenizer.apply_chat_template(turns, tokenize=False)
        return prompt + self.options.separator + completion

    @torch.no_grad()
    def scores(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        texts = [self.text(p, c) for p, c in zip(prompts, completions, strict=True)]
        device = next(self.model.parameters()).device

        def score(rows: list[int]) -> torch.Tensor:
            batch = self.tokenizer(
                [texts[i] for i in rows],
                truncation=True,
                max_length=self.options.max_length,
                padding=True,
                add_special_tokens=not self.templated,  # a template writes its own
                return_tensors="pt",
            ).to(device)
            logits = self.model(**batch).logits.float()
            if self.index is None:
                return logits[:, 0]
            return logits.softmax(-1)[:, self.index]

        return in_batches(score, texts, self.options.batch_size)
