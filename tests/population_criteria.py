"""Score functions for the population tests (importable as ``python:population_criteria:…``):
three groups that rank the completions "x", "y", "z" in the three rotations of one order."""

RANKS = {
    "first": {"x": 3, "y": 2, "z": 1},
    "second": {"y": 3, "z": 2, "x": 1},
    "third": {"z": 3, "x": 2, "y": 1},
}


def first(prompt: str, completion: str) -> float:
    return RANKS["first"][completion]


def second(prompt: str, completion: str) -> float:
    return RANKS["second"][completion]


def third(prompt: str, completion: str) -> float:
    return RANKS["third"][completion]
