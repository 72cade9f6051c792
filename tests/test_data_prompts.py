"""``nlhf.data.prompts``: the prompt options every command shares and the texts they give."""

import json
from dataclasses import dataclass, fields

from nlhf.config import option
from nlhf.data.prompts import PromptFields, load_prompt_texts


class TemplateTokenizer:
    """Just enough of a tokenizer for ``render_prompt``: a chat template that tags turns."""

    chat_template = "tagged"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert not tokenize and add_generation_prompt
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


def prompt_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    rows = [{"prompt": "once upon a time"}, {"prompt": [{"role": "user", "content": "hi"}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_every_field_has_help_and_a_config_can_extend_them():
    @dataclass
    class Config(PromptFields):
        steps: int = option(3, "steps")

    config = Config(prompts="hh")
    assert (config.prompts, config.prompt_words, config.chat_template) == ("hh", 8, False)
    assert all(f.metadata["help"] for f in fields(PromptFields))


def test_text_prompts_stay_as_written_and_chat_prompts_are_rendered(tmp_path):
    plain = load_prompt_texts(PromptFields(prompts=prompt_file(tmp_path)), seed=0)
    assert plain[0] == "once upon a time"
    assert plain[1].endswith("hi\n\nAssistant:")  # turns as plain text, without a tokenizer
    chat = PromptFields(prompts=prompt_file(tmp_path), chat_template=True)
    assert load_prompt_texts(chat, 0, TemplateTokenizer()) == [
        "<user>once upon a time<assistant>",
        "<user>hi<assistant>",
    ]


def test_imdb_openings_follow_the_seed_and_the_word_count():
    fields_ = PromptFields(prompt_words=3)
    first, again = load_prompt_texts(fields_, 1), load_prompt_texts(fields_, 1)
    assert first == again and all(len(t.split()) <= 3 for t in first[:50])
    assert load_prompt_texts(fields_, 2)[:20] != first[:20]


def test_hh_prompts_are_the_packaged_dialogues():
    texts = load_prompt_texts(PromptFields(prompts="hh"), 0)
    assert len(texts) == 2312 and all(t.endswith("Assistant:") for t in texts[:20])
