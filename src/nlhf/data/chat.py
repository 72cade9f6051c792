"""Prompt → model input text: the tokenizer's chat template when it has one, else plain text.

Plain text is the Anthropic HH layout without its leading blank line::

    Human: How do I bake bread?

    Assistant:

(``System:`` for system turns).  A plain-text prompt counts as one user turn either way.

    from nlhf.data.chat import render_conversation, render_prompt
    text = render_prompt(pair.prompt, tokenizer)                  # ends ready for the reply
    full = render_conversation(pair.prompt, pair.chosen, tokenizer)  # for reward models

Some chat templates insist that roles alternate; HH prompts keep the turns as written, which in
a few rows means two assistant turns in a row, and such a template will raise on them.
"""

from __future__ import annotations

from typing import Any

from nlhf.data.schema import Prompt, PromptContent, as_prompt_content, prompt_messages

PLAIN_NAMES = {"system": "System", "user": "Human", "assistant": "Assistant"}


def has_chat_template(tokenizer: Any) -> bool:
    """True when ``tokenizer`` is not None and carries a chat template."""
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def _messages(prompt: PromptContent | Prompt | list[dict[str, str]]) -> list[dict[str, str]]:
    return prompt_messages(as_prompt_content(prompt))


def _plain(messages: list[dict[str, str]]) -> str:
    return "\n\n".join(f"{PLAIN_NAMES[m['role']]}: {m['content']}" for m in messages)


def render_prompt(
    prompt: PromptContent | Prompt | list[dict[str, str]], tokenizer: Any = None
) -> str:
    """The prompt as text that ends where the assistant's reply begins."""
    messages = _messages(prompt)
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return _plain(messages) + "\n\nAssistant:"


def render_conversation(
    prompt: PromptContent | Prompt | list[dict[str, str]], response: str, tokenizer: Any = None
) -> str:
    """Prompt and reply as one text (e.g. the input of a reward model)."""
    messages = [*_messages(prompt), {"role": "assistant", "content": response}]
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(messages, tokenize=False)
    return _plain(messages)
