"""Comparison tasks sampled on the spot: two responses per prompt from one or two policies.

    from nlhf.label.generate import load_model, tasks_from_policies
    policy = load_model("runs/sft/model")                 # a causal LM folder (+ tokenizer)
    tasks, dropped = tasks_from_policies(policy, ["Write a haiku about rain."],
                                         opponent=load_model("runs/ref/model"))

Response A comes from the policy, response B from the ``opponent`` or, without one, from a
second sample of the policy (the labeler sees them in a random order).  ``info`` records who
wrote which and the sampling settings, so a win rate can be read off the labels later.  Prompts
are rendered as :func:`nlhf.data.chat.render_prompt` does; response A of prompt i is drawn with
``row_generators(seed, 0, [i])`` and B with ``row_generators(seed, 1, [i])``, so a task's text
depends on neither ``batch_size`` nor the other prompts.  Responses are stripped of surrounding
whitespace; pairs that are then empty or identical are dropped (``dropped`` counts them).
Models load with :func:`nlhf.models.lm.load_causal_lm` (float32), from hub names only where
the machine has access.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nlhf.data import PromptContent
from nlhf.data.chat import render_prompt
from nlhf.label.tasks import TaskInput
from nlhf.models.lm import load_causal_lm
from nlhf.models.sampling import row_generators, sample
from nlhf.models.text import decode_completions, tokenize_prompts


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer (left padding, a pad token) and a display name."""

    model: Any
    tokenizer: Any
    name: str


def load_model(path: str, name: str | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer from a folder for sampling (eval mode)."""
    model, tokenizer = load_causal_lm(path)
    return LoadedModel(model, tokenizer, name or Path(path).name or path)


def _complete(
    lm: LoadedModel,
    prompts: Sequence[PromptContent],
    rows: list[int],
    copies: Sequence[int],
    settings: dict[str, Any],
    seed: int,
) -> list[list[str]]:
    """For each copy c, one completion of every prompt: result[k][i] for ``copies[k]`` and
    prompt i, whose generator is seeded by (seed, c, its row)."""
    texts = [render_prompt(p, lm.tokenizer) for p in prompts] * len(copies)
    device = next(lm.model.parameters()).device
    ids, mask = tokenize_prompts(lm.tokenizer, texts, device)
    generators = [g for c in copies for g in row_generators(seed, c, rows)]
    out = sample(
        lm.model,
        ids,
        mask,
        settings["max_new_tokens"],
        temperature=settings["temperature"],
        top_p=settings["top_p"],
        generator=generators,
        eos_token_id=lm.tokenizer.eos_token_id,
        pad_token_id=lm.tokenizer.pad_token_id,
    )
    # labelers see the text without surrounding whitespace; whitespace-only counts as empty
    decoded = [text.strip() for text in decode_completions(lm.tokenizer, out.tokens, out.mask)]
    n = len(prompts)
    return [decoded[k * n : (k + 1) * n] for k in range(len(copies))]


def tasks_from_policies(
    policy: LoadedModel,
    prompts: Sequence[PromptContent],
    *,
    opponent: LoadedModel | None = None,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_p: float | None = None,
    seed: int = 0,
    batch_size: int = 8,
    source: str | None = None,
) -> tuple[list[TaskInput], int]:
    """One task per prompt (see the module docstring); returns (tasks, pairs dropped)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    settings = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p}
    names = {"a": policy.name, "b": opponent.name if opponent else policy.name}
    info = {"models": names, "sampling": {**settings, "seed": seed}}
    tasks: list[TaskInput] = []
    dropped = 0
    for start in range(0, len(prompts), batch_size):
        chunk = list(prompts[start : start + batch_size])
        rows = list(range(start, start + len(chunk)))
        if opponent is None:
            first, second = _complete(policy, chunk, rows, (0, 1), settings, seed)
        else:
            (first,) = _complete(policy, chunk, rows, (0,), settings, seed)
            (second,) = _complete(opponent, chunk, rows, (1,), settings, seed)
        for prompt, a, b in zip(chunk, first, second, strict=True):
            if not a or not b or a == b:
                dropped += 1
                continue
            tasks.append(TaskInput(prompt, a, b, source=source, info=dict(info)))
    return tasks, dropped
