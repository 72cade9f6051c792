"""How well a judge agrees with labelled preference pairs: numpy metrics and one runner.

    from nlhf.judge.evaluation import judge_pairs, judge_metrics, agreement, weighted_kappa
    verdict = judge_pairs(judge, prompts, chosen, rejected, batch_size=32)
    metrics = judge_metrics(verdict, longer_wins(chosen, rejected))

``p`` is P(chosen ≻ rejected) per pair.  A pick is 1 (chosen), 0 (rejected) or ½ (p = ½
exactly, a tie), and two picks agree by 1 − |x − y|, so a tie against a pick counts half.
Accuracy is the picks' agreement with the labels (95% Wilson interval); length bias is the
agreement with "the longer response wins" (characters), of the labels and of the judge;
κ is Cohen's κ with the same agreement weights (plain Cohen's κ when no pick is a tie).
Log loss is −log p; ECE (10 bins) is over both orders of each pair, p with outcome 1 and
1 − p with outcome 0 (over the chosen side alone it would just be 1 − mean p).  Position
bias needs ``both_orders`` (pairwise LM judges): the mean of ½(P_A(c, r) + P_A(r, c)) − ½,
P_A the probability that the response shown first wins, with a 95% t interval over pairs;
> 0 means the judge favours the first position.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from nlhf.eval.stats import Estimate, mean_interval
from nlhf.metrics import expected_calibration_error, log_loss, wilson_interval
from nlhf.models.errors import ModelError

PICKS = (0.0, 0.5, 1.0)
"""The picks: the rejected response, a tie, the chosen response."""


def picks(p: np.ndarray) -> np.ndarray:
    """1 where p > ½ (the chosen response wins), 0 where p < ½, ½ where p = ½ exactly."""
    p = np.asarray(p, dtype=np.float64)
    return np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))


def agreement(x: np.ndarray, y: np.ndarray) -> float:
    """Mean of 1 − |x − y| over two arrays of picks: a tie against a pick counts half."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return float(np.mean(1.0 - np.abs(x - y)))


def accuracy(p: np.ndarray) -> tuple[float, float, float]:
    """(accuracy, 95% Wilson low, high) of the picks of ``p`` against the labels."""
    right = picks(p)
    low, high = wilson_interval(float(right.sum()), len(right))
    return float(right.mean()), low, high


def longer_wins(chosen: Sequence[str], rejected: Sequence[str]) -> np.ndarray:
    """The picks of "the longer response wins" (characters; equal lengths: ½)."""
    c = np.array([len(t) for t in chosen], dtype=np.float64)
    r = np.array([len(t) for t in rejected], dtype=np.float64)
    return 0.5 + 0.5 * np.sign(c - r)


def weighted_kappa(x: np.ndarray, y: np.ndarray) -> float:
    """Cohen's κ = (p_o − p_e) / (1 − p_e) of two arrays of picks, weighted (a tie against a
    pick agrees ½): p_o their :func:`agreement`, p_e the agreement expected from their pick
    frequencies alone; NaN when p_e = 1.  The categorical κ is nlhf.label.agreement's."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    fx = np.array([np.mean(x == k) for k in PICKS])
    fy = np.array([np.mean(y == k) for k in PICKS])
    weights = 1.0 - np.abs(np.subtract.outer(PICKS, PICKS))
    p_e = float(fx @ weights @ fy)
    if math.isclose(p_e, 1.0):
        return math.nan
    return (agreement(x, y) - p_e) / (1.0 - p_e)


def calibration_error(p: np.ndarray, bins: int = 10) -> float:
    """ECE of ``p`` over both orders of each pair (p → outcome 1, 1 − p → outcome 0)."""
    p = np.asarray(p, dtype=np.float64)
    outcomes = np.concatenate([np.ones_like(p), np.zeros_like(p)])
    return expected_calibration_error(np.concatenate([p, 1.0 - p]), outcomes, bins)


def position_bias(first_a: np.ndarray, first_b: np.ndarray) -> Estimate:
    """Mean of ½(P_A(a, b) + P_A(b, a)) − ½ with a 95% t interval over pairs, where
    ``first_a`` is P(a wins) with a shown first and ``first_b`` P(b wins) with b first."""
    bias = 0.5 * (np.asarray(first_a, np.float64) + np.asarray(first_b, np.float64)) - 0.5
    return mean_interval(bias, bounds=(-0.5, 0.5))


@dataclass(frozen=True)
class Verdict:
    """What one judge said about every pair."""

    p: np.ndarray
    """(n,) P(chosen ≻ rejected)."""
    first_chosen: np.ndarray | None
    """(n,) P(chosen wins) with chosen shown first; None for judges without both_orders."""
    first_rejected: np.ndarray | None
    """(n,) P(rejected wins) with rejected shown first; None likewise."""
    seconds: float


def judge_pairs(
    judge: Any,
    prompts: Sequence[str],
    chosen: Sequence[str],
    rejected: Sequence[str],
    batch_size: int = 32,
    progress: bool = False,
    name: str = "judge",
) -> Verdict:
    """Ask ``judge`` about every pair, ``batch_size`` pairs per call.  A judge with
    ``both_orders`` is asked through it, and P(c ≻ r) = ½(P_A(c, r) + 1 − P_A(r, c)), as
    a pairwise LM judge defines it (so each pair is judged once in each order, not twice)."""
    both_orders = getattr(judge, "both_orders", None)
    n, start = len(prompts), time.perf_counter()
    p, first_c, first_r = np.empty(n), np.empty(n), np.empty(n)
    with tqdm(total=n, desc=f"judging ({name})", unit="pair", disable=not progress) as bar:
        for i in range(0, n, batch_size):
            rows = slice(i, min(i + batch_size, n))
            args = (list(prompts[rows]), list(chosen[rows]), list(rejected[rows]))
            if both_orders is None:
                p[rows] = np.asarray(judge(*args), dtype=np.float64)
            else:
                a, b = (np.asarray(t, dtype=np.float64) for t in both_orders(*args))
                first_c[rows], first_r[rows] = a, b
                p[rows] = 0.5 * (a + 1.0 - b)
            bar.update(rows.stop - rows.start)
    bad = np.flatnonzero(~np.isfinite(p) | (p < 0) | (p > 1))
    if bad.size:
        raise ModelError(
            f"{name}: {bad.size} probabilities are not in [0, 1] (the first, of pair "
            f"{bad[0]}, is {p[bad[0]]})"
        )
    seconds = time.perf_counter() - start
    if both_orders is None:
        return Verdict(p, None, None, seconds)
    return Verdict(p, first_c, first_r, seconds)


def judge_metrics(verdict: Verdict, longer: np.ndarray) -> dict[str, Any]:
    """Accuracy (95% Wilson interval), mean p, log loss, ECE, position bias (None without
    both_orders) and the agreement of the judge's picks with ``longer`` (see the module)."""
    p = verdict.p
    acc, low, high = accuracy(p)
    bias = None
    if verdict.first_chosen is not None and verdict.first_rejected is not None:
        bias = position_bias(verdict.first_chosen, verdict.first_rejected).as_dict()
    return {
        "pairs": len(p),
        "accuracy": acc,
        "accuracy_ci95": [low, high],
        "mean_p_chosen": float(p.mean()),
        "log_loss": log_loss(p, np.ones_like(p)),
        "ece": calibration_error(p),
        "position_bias": bias,
        "picks_longer": agreement(picks(p), longer),
        "seconds": verdict.seconds,
    }


def disagreements(p: np.ndarray, q: np.ndarray, show: int) -> list[int]:
    """Up to ``show`` pairs where two judges pick differently, largest |p − q| first."""
    differ = np.flatnonzero(picks(p) != picks(q))
    order = np.argsort(-np.abs(np.asarray(p)[differ] - np.asarray(q)[differ]), kind="stable")
    return [int(i) for i in differ[order][:show]]
