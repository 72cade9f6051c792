"""A causal LM as a pairwise judge: it reads x, a and b and answers "A" or "B".

    judge = PairwiseLMJudge.load("path/to/instruct-model")        # default template
    judge = PairwiseLMJudge.load(path, JudgeOptions(template="…{prompt}…{a}…{b}…",
                                                    answers="1,2"))
    first_a, first_b = judge.both_orders(prompts, a, b)   # P(first shown wins), each order

The probability of the first answer is read from the next-token logits of the two answer
strings (their first tokens), renormalized over the two.  Every comparison is asked in both
orders and averaged, P(a ≻ b) = ½·(P_A(a, b) + 1 − P_A(b, a)), so a bias towards either
position cancels and P(a ≻ b) + P(b ≻ a) = 1 and P(a ≻ a) = ½ hold exactly; the bias itself,
mean ½·(P_A(a, b) + P_A(b, a)) − ½, is what ``both_orders`` lets a caller measure
(``nlhf judge eval`` reports it).  With a chat template the filled template is a user turn
followed by the generation prompt; without one it ends with ``Answer:``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from nlhf.models.errors import ModelError
from nlhf.models.judges.base import DEFAULTS, JudgeOptions, check, in_batches
from nlhf.models.lm import load_causal_lm

DEFAULT_TEMPLATE = (
    "Which response answers the prompt better? Reply with one letter, A or B.\n\n"
    "Prompt:\n{prompt}\n\nResponse A:\n{a}\n\nResponse B:\n{b}"
)


class PairwiseLMJudge:
    """P(a ≻ b | x) from a causal LM's answer-token probabilities, both orders averaged."""

    def __init__(self, model, tokenizer, options: JudgeOptions = DEFAULTS) -> None:
        self.model, self.tokenizer, self.options = model.eval(), tokenizer, options
        self.template = options.template or DEFAULT_TEMPLATE
        for field in ("{prompt}", "{a}", "{b}"):
            if field not in self.template:
                raise ModelError(f"judge_template: needs {field} (it has {self.template[:60]!r})")
        answers = [s for s in options.answers.split(",") if s]
        if len(answers) != 2:
            raise ModelError(f"judge_answers {options.answers!r}: give two, e.g. A,B")
        self.chat = bool(getattr(tokenizer, "chat_template", None))
        # without a template the text ends with "Answer:" and the answer's token carries its
        # space, unless the tokenizer splits the space off (then the text ends with it)
        self.suffix = "" if self.chat else "\nAnswer:"
        self.answer_ids = self._first_tokens(answers, "" if self.chat else " ")
        if not self.chat and self.answer_ids[0] == self.answer_ids[1]:
            self.suffix, self.answer_ids = "\nAnswer: ", self._first_tokens(answers, "")
        if self.answer_ids[0] == self.answer_ids[1]:
            raise ModelError(f"judge_answers {options.answers!r}: both start with one token")
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token

    def _first_tokens(self, answers: list[str], lead: str) -> list[int]:
        return [
            self.tokenizer.encode(lead + a.strip(), add_special_tokens=False)[0] for a in answers
        ]

    @classmethod
    def load(cls, where: str | Path, options: JudgeOptions = DEFAULTS) -> PairwiseLMJudge:
        model, tokenizer = load_causal_lm(str(where), options.dtype)
        return cls(model.to(options.torch_device()), tokenizer, options)

    def _clip(self, text: str, tokens: int, keep_end: bool) -> str:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) <= tokens:
            return text
        ids = ids[-tokens:] if keep_end else ids[:tokens]
        return self.tokenizer.decode(ids)

    def text(self, prompt: str, first: str, second: str) -> str:
        share = max(8, (self.options.max_length - 64) // 3)  # the template's words fit in 64
        filled = self.template.format(
            prompt=self._clip(prompt, share, keep_end=True),
            a=self._clip(first, share, keep_end=False),
            b=self._clip(second, share, keep_end=False),
        )
        if self.chat:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": filled}], tokenize=False, add_generation_prompt=True
            )
        return filled + self.suffix

    @torch.no_grad()
    def first_wins(self, texts: Sequence[str]) -> torch.Tensor:
        """P(first answer) for each filled prompt, renormalized over the two answers."""
        device = next(self.model.parameters()).device

        def prob(rows: list[int]) -> torch.Tensor:
            batch = self.tokenizer(
                [texts[i] for i in rows],
                padding=True,
                add_special_tokens=not self.chat,
                return_tensors="pt",
            ).to(device)
            # left padding: positions count from each row's first real token
            positions = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0)
            out = self.model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                position_ids=positions,
            )
            logits = out.logits[:, -1, self.answer_ids].float()
            return logits.softmax(-1)[:, 0]

        return in_batches(prob, texts, self.options.batch_size)

    def both_orders(self, prompts, a, b) -> tuple[torch.Tensor, torch.Tensor]:
        """(P(a wins) shown as first, P(b wins) shown as first) for each comparison."""
        check(prompts, a, b)
        n = len(prompts)
        texts = [self.text(x, y, z) for x, y, z in zip(prompts, a, b, strict=True)]
        texts += [self.text(x, z, y) for x, y, z in zip(prompts, a, b, strict=True)]
        p = self.first_wins(texts)
        return p[:n], p[n:]

    def __call__(self, prompts, a, b) -> torch.Tensor:
        a_first, b_first = self.both_orders(prompts, a, b)
        return 0.5 * (a_first + 1.0 - b_first)
