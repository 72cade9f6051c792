"""Length-only baselines: how well "the shorter (or longer) response wins" predicts the labels.

A reward or preference model that only learned response length scores about this well, so every
accuracy report should show it beside the model's.  Ties count as a coin flip (half right).

    from nlhf.data import length_baseline_accuracy, load_hh_harmless
    pairs = load_hh_harmless()
    length_baseline_accuracy(pairs)                      # "shorter preferred", characters
    length_baseline_accuracy(pairs, prefer="longer", length=lambda t: len(t.split()))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from nlhf.data.schema import PreferencePair


@dataclass(frozen=True)
class LengthStats:
    """How often the chosen response is shorter than, longer than, or as long as the rejected."""

    chosen_shorter: int
    chosen_longer: int
    tied: int

    @property
    def n(self) -> int:
        return self.chosen_shorter + self.chosen_longer + self.tied

    def accuracy(self, prefer: Literal["shorter", "longer"] = "shorter") -> float:
        """Accuracy of always preferring the shorter (or longer) response; ties count ½."""
        if prefer not in ("shorter", "longer"):
            raise ValueError(f"prefer must be 'shorter' or 'longer', got {prefer!r}")
        if self.n == 0:
            raise ValueError("no pairs: the length baseline is undefined")
        right = self.chosen_shorter if prefer == "shorter" else self.chosen_longer
        return (right + 0.5 * self.tied) / self.n

    def describe(self) -> str:
        n = self.n
        return (
            f"{n} pairs: chosen shorter {self.chosen_shorter / n:.1%}, longer "
            f"{self.chosen_longer / n:.1%}, tied {self.tied / n:.1%}; length baseline accuracy: "
            f"shorter preferred {self.accuracy('shorter'):.3f}, "
            f"longer preferred {self.accuracy('longer'):.3f}"
        )


def compare_lengths(
    pairs: Iterable[PreferencePair], length: Callable[[str], int] = len
) -> LengthStats:
    """Count pairs by which response is shorter; ``length`` measures a response (characters)."""
    shorter = longer = tied = 0
    for pair in pairs:
        chosen, rejected = length(pair.chosen), length(pair.rejected)
        shorter += chosen < rejected
        longer += chosen > rejected
        tied += chosen == rejected
    return LengthStats(shorter, longer, tied)


def length_baseline_accuracy(
    pairs: Iterable[PreferencePair],
    *,
    prefer: Literal["shorter", "longer"] = "shorter",
    length: Callable[[str], int] = len,
) -> float:
    """Fraction of pairs a "prefer the shorter (longer) response" rule gets right; ties ½."""
    return compare_lengths(pairs, length).accuracy(prefer)
