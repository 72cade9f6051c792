"""Score functions for ``python:`` judges in the tests (``load_judge("python:judge_functions:…")``).

load_judge("python:judge_functions:length")      # the longer completion wins
"""


def length(prompt: str, completion: str) -> float:
    """Characters over 10: σ(Δ/10) prefers the longer completion."""
    return len(completion) / 10


def good_words(prompt: str, completion: str) -> float:
    """How often "good" occurs minus how often "bad" does."""
    words = completion.lower().split()
    return float(words.count("good") - words.count("bad"))
