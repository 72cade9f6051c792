"""Chat rendering with a tiny in-process tokenizer, and the plain-text fallback."""

from __future__ import annotations

import pytest

from nlhf.data import PreferencePair, Prompt, has_chat_template, render_conversation, render_prompt

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"[UNK]": 0, "hi": 1, "there": 2}
    core = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]")


def test_plain_fallback_without_template(tokenizer):
    assert not has_chat_template(tokenizer) and not has_chat_template(None)
    assert render_prompt("hi") == "Human: hi\n\nAssistant:"
    chat = [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"},
    ]
    expected = "System: Be kind.\n\nHuman: hi\n\nAssistant: hello\n\nHuman: bye\n\nAssistant:"
    assert render_prompt(chat, tokenizer) == expected
    assert render_conversation(chat, "ciao", tokenizer) == expected + " ciao"


def test_chat_template_used_when_present(tokenizer):
    tokenizer.chat_template = TEMPLATE
    try:
        assert has_chat_template(tokenizer)
        pair = PreferencePair([{"role": "user", "content": "hi"}], "there", "go")
        assert render_prompt(pair.prompt, tokenizer) == "<|user|>hi\n<|assistant|>"
        assert render_prompt(Prompt("hi"), tokenizer) == "<|user|>hi\n<|assistant|>"
        full = render_conversation(pair.prompt, pair.chosen, tokenizer)
        assert full == "<|user|>hi\n<|assistant|>there\n"
        assert tokenizer(full)["input_ids"].count(2) == 1  # the rendered text tokenizes
    finally:
        tokenizer.chat_template = None
