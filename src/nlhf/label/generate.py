"""Comparison tasks sampled on the spot: two responses per prompt from one or two policies.

    from nlhf.label.generate import load_model, tasks_from_policies
    policy = load_model("runs/sft/model")                 # a causal LM folder (+ tokenizer)
    tasks, dropped = tasks_from_policies(policy, ["Write a haiku about rain."],
                                         opponent=load_model("runs/ref/model"))

With one policy, response A and response B are two independent samples from it; with an
``opponent``, A comes from the policy and B from the opponent (the labeler sees them in a
random order either way).  Each task records in ``info`` which model wrote which response and
the sampling settings, so a policy-vs-opponent win rate can be read off the labels later.
Pairs whose two responses are empty or identical after decoding cannot be compared and are
dropped (``dropped`` counts them).

Prompts are rendered with the tokenizer's chat template when it has one (as
:func:`nlhf.data.chat.render_prompt` does) and decoding uses :func:`nlhf.models.sample`
(KV-cached, seeded).  Models are loaded with transformers from local folders; nothing is
downloaded unless a hub name is given on a machine that has access.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nlhf.data import PromptContent
from nlhf.data.chat import render_prompt
from nlhf.label.tasks import TaskInput


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer (left padding, a pad token) and a display name."""

    model: Any
    tokenizer: Any
    name: str


def load_model(path: str, name: str | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer from a folder for sampling (eval mode)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from nlhf.models.memory import into_memory

    try:
        model = into_memory(AutoModelForCausalLM.from_pretrained(path))
        tokenizer = AutoTokenizer.from_pretrained(path)
    except OSError as exc:
        raise OSError(f"{path}: cannot load a causal LM and its tokenizer: {exc}") from None
    return wrap_model(model, tokenizer, name or Path(path).name or path)


def wrap_model(model: Any, tokenizer: Any, name: str) -> LoadedModel:
    """A model object and tokenizer prepared for batched sampling."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.eval()
    return LoadedModel(model, tokenizer, name)


def _complete(
    lm: LoadedModel,
    prompts: Sequence[PromptContent],
    copies: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float | None,
    seed: int,
) -> list[list[str]]:
    """``copies`` independent completions per prompt: result[c][i] for prompt i."""
    import torch

    from nlhf.models import sample

    texts = [render_prompt(p, lm.tokenizer) for p in prompts] * copies
    batch = lm.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = sample(
        lm.model,
        batch["input_ids"],
        batch["attention_mask"],
        max_new_tokens,
        temperature=temperature,
        top_p=top_p,
        generator=torch.Generator().manual_seed(seed),
        eos_token_id=lm.tokenizer.eos_token_id,
        pad_token_id=lm.tokenizer.pad_token_id,
    )
    decoded = []
    for row, mask in zip(out.tokens, out.mask, strict=True):
        ids = row[mask.bool()].tolist()
        decoded.append(lm.tokenizer.decode(ids, skip_special_tokens=True).strip())
    n = len(prompts)
    return [decoded[c * n : (c + 1) * n] for c in range(copies)]


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
        step_seed = seed + start
        args = (max_new_tokens, temperature, top_p)
        if opponent is None:
            first, second = _complete(policy, chunk, 2, *args, step_seed)
        else:
            (first,) = _complete(policy, chunk, 1, *args, step_seed)
            (second,) = _complete(opponent, chunk, 1, *args, step_seed + 1)
        for prompt, a, b in zip(chunk, first, second, strict=True):
            if not a or not b or a == b:
                dropped += 1
                continue
            tasks.append(TaskInput(prompt, a, b, source=source, info=dict(info)))
    return tasks, dropped
