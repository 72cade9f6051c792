"""Text in and out of a causal LM: prompts to left-padded tokens, completions back to text.

    from nlhf.models.text import decode_completions, eos_token_ids, tokenize_prompts
    ids, mask = tokenize_prompts(tokenizer, ["The film was", "I"], device)   # left-padded
    out = sample(model, ids, mask, 24, eos_token_id=eos_token_ids(model, tokenizer))
    texts = decode_completions(tokenizer, out.tokens, out.mask)

Conventions every sampler of the package shares:

- prompts are tokenized as written, with no special tokens added (a chat template or a BOS
  belongs in the prompt text), and padded on the left, as the decode loop expects;
- a completion is its tokens under the mask (up to and including EOS); special tokens are
  dropped from its text and whitespace is kept as decoded;
- :func:`eos_token_ids` ends a completion and :func:`pad_token_id` fills the rest: the
  tokenizer's ids first, then the model's configs.
"""

from __future__ import annotations

from typing import Any

import torch


def tokenize_prompts(
    tokenizer: Any, texts: list[str], device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of ``texts`` on ``device``: left-padded, no special tokens added
    (sets ``tokenizer.padding_side`` to ``"left"``)."""
    tokenizer.padding_side = "left"
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    return enc["input_ids"].to(device), enc["attention_mask"].to(device)


def decode_completions(tokenizer: Any, tokens: torch.Tensor, mask: torch.Tensor) -> list[str]:
    """The text of each row's masked tokens, special tokens skipped, whitespace kept."""
    return [
        tokenizer.decode(row[m.bool()].tolist(), skip_special_tokens=True)
        for row, m in zip(tokens, mask, strict=True)
    ]


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]


def eos_token_ids(model: Any, tokenizer: Any = None) -> list[int]:
    """EOS ids from the tokenizer, else the model's generation config, else its config."""
    if tokenizer is not None and getattr(tokenizer, "eos_token_id", None) is not None:
        return _as_list(tokenizer.eos_token_id)
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        ids = _as_list(getattr(source, "eos_token_id", None))
        if ids:
            return ids
    return []


def pad_token_id(model: Any, tokenizer: Any = None) -> int:
    """The id written after EOS: tokenizer's pad, the config's pad, the first EOS, or 0."""
    if tokenizer is not None and getattr(tokenizer, "pad_token_id", None) is not None:
        return int(tokenizer.pad_token_id)
    pad = getattr(getattr(model, "config", None), "pad_token_id", None)
    if pad is not None:
        return int(pad)
    eos = eos_token_ids(model, tokenizer)
    return eos[0] if eos else 0
