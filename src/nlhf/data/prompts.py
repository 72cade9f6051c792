"""The prompt pool of a run: which prompts, and how they become model-input text.

    @dataclass
    class Config(PromptFields):          # adds --prompts, --prompt-words, --chat-template
        steps: int = option(100, "optimizer steps")

    texts = load_prompt_texts(config, seed=0, tokenizer=tokenizer)

``prompts`` names the pool: ``imdb`` (the first ``prompt_words`` words of movie reviews, drawn
with ``seed``), ``hh`` (the HH-RLHF harmless dialogues packaged with nlhf) or a prompt file
(:func:`nlhf.data.load_prompts`).  Text prompts are used as written unless ``chat_template``
is set; chat prompts (lists of turns) are always rendered, with the tokenizer's template when
``chat_template`` is set and as plain "Human:/Assistant:" text otherwise
(:func:`nlhf.data.chat.render_prompt`).  Every command that reads prompts (training, the
tournament) takes these fields, so the same options give the same texts everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nlhf.config import Checked, option
from nlhf.data.chat import render_prompt
from nlhf.data.hh import load_hh_harmless
from nlhf.data.loader import check_source, load_prompts
from nlhf.data.movie_reviews import review_prompts

#: The prompt pools that ``prompts`` names without a file.
PROMPT_SETS = ("imdb", "hh")


@dataclass
class PromptFields(Checked):
    """The options that choose the prompts and how they are rendered."""

    prompts: str = option(
        "imdb", "prompts: imdb (openings of movie reviews), hh (HH-RLHF dialogues) or a file"
    )
    prompt_words: int = option(8, "imdb prompts: the first this many words of a review")
    chat_template: bool = option(
        False, "render prompts with the tokenizer's chat template (else plain continuation)"
    )

    def check(self) -> None:
        self.at_least(1, "prompt_words")


def load_prompt_texts(fields: PromptFields, seed: int, tokenizer: Any = None) -> list[str]:
    """The prompt pool as model-input texts (see the module docstring); ``seed`` orders the
    ``imdb`` openings, ``tokenizer`` supplies the chat template when one is asked for."""
    check_source("prompts", fields.prompts, PROMPT_SETS)
    if fields.prompts == "imdb":
        prompts = review_prompts(words=fields.prompt_words, seed=seed)
    elif fields.prompts == "hh":
        prompts = [pair.prompt for pair in load_hh_harmless()]
    else:
        prompts = load_prompts(fields.prompts)
    texts = []
    for p in prompts:
        content = getattr(p, "content", p)
        if fields.chat_template or not isinstance(content, str):
            texts.append(render_prompt(content, tokenizer if fields.chat_template else None))
        else:
            texts.append(content)
    return texts
