"""Win-rate matrices, confidence intervals and judge disagreement: pure numpy, no models.

    from nlhf.eval.stats import win_rate_matrix, disagreement
    prefs = {(0, 1): p01, (0, 2): p02, (1, 2): p12}   # (prompts, comparisons) of P(a ≻ b)
    rates = win_rate_matrix(prefs, k=3)                # rates.mean[a, b] = P(a ≻ b)
    dis = disagreement(prefs_vader, prefs_pm, k=3)      # where two judges pick different winners

The unit of independence is the prompt.  Several completions per prompt share the prompt,
so their outcomes are correlated; each prompt's comparisons are therefore averaged first
(one number per prompt), and the interval is taken over prompts: by default Student's t,
mean ± t_{0.975, n−1}·sd/√n with sd the sample standard deviation (ddof 1) of the per-prompt
means, or a seeded percentile bootstrap over prompts.  Intervals of probabilities are clipped
to [0, 1].  With fewer than two prompts an interval is undefined and its ends are NaN.

Only the pairs a < b are given: P(b ≻ a) = 1 − P(a ≻ b) holds for every judge, so the lower
triangle is filled by reflection (the interval reflects too) and the diagonal is ½ exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.stats import t

Method = Literal["t", "bootstrap"]
Pairs = dict[tuple[int, int], np.ndarray]


@dataclass(frozen=True)
class Estimate:
    """A mean over prompts and its confidence interval."""

    mean: float
    low: float
    high: float
    n: int
    """number of prompts (independent units) behind the estimate."""

    def as_dict(self) -> dict[str, float | int | None]:
        return {k: _finite_or_none(v) for k, v in vars(self).items()}


def _finite_or_none(value: float | int) -> float | int | None:
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def per_prompt(values: np.ndarray) -> np.ndarray:
    """Average each prompt's comparisons: (prompts,) or (prompts, c, …) → (prompts,)."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0:
        raise ValueError("expected an array with one row per prompt, got a scalar")
    if values.shape[0] == 0:
        raise ValueError("no prompts: the array has zero rows")
    return values.reshape(values.shape[0], -1).mean(axis=1)


def mean_interval(
    values: np.ndarray,
    level: float = 0.95,
    method: Method = "t",
    bounds: tuple[float, float] | None = None,
    resamples: int = 2000,
    seed: int = 0,
) -> Estimate:
    """Mean over prompts with a ``level`` interval; ``values`` as in :func:`per_prompt`."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    x = per_prompt(values)
    n = x.shape[0]
    mean = float(x.mean())
    if n < 2:
        low = high = float("nan")
    elif method == "t":
        half = float(t.ppf(0.5 + level / 2, n - 1) * x.std(ddof=1) / np.sqrt(n))
        low, high = mean - half, mean + half
    elif method == "bootstrap":
        rng = np.random.default_rng(seed)
        means = x[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
        low, high = (float(q) for q in np.quantile(means, [0.5 - level / 2, 0.5 + level / 2]))
    else:
        raise ValueError(f"method must be 't' or 'bootstrap', got {method!r}")
    if bounds is not None and n >= 2:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return Estimate(mean, low, high, n)


@dataclass(frozen=True)
class WinRates:
    """P(row ≻ column) with its interval, and each policy's mean win rate against the rest."""

    mean: np.ndarray
    """(k, k); the diagonal is ½."""
    low: np.ndarray
    high: np.ndarray
    n_prompts: int
    versus_rest: list[Estimate]
    """per policy: the per-prompt average of P(a ≻ b) over every b ≠ a, with its interval."""
    worst_case: list[Estimate]
    """per policy: min over b ≠ a of P(a ≻ b), with a bootstrap interval over prompts."""
    worst_opponent: list[int]
    """per policy: the b that attains its worst case."""
    best_response: list[Estimate]
    """per policy: P(a ≻ the best response that picks an entrant b ≠ a per prompt)."""

    def as_dict(self) -> dict:
        return {
            "win_rate": _matrix(self.mean),
            "low": _matrix(self.low),
            "high": _matrix(self.high),
            "n_prompts": self.n_prompts,
            "versus_rest": [e.as_dict() for e in self.versus_rest],
            "worst_case": [e.as_dict() for e in self.worst_case],
            "worst_opponent": list(self.worst_opponent),
            "best_response": [e.as_dict() for e in self.best_response],
        }


def _matrix(m: np.ndarray) -> list[list[float | None]]:
    return [[_finite_or_none(float(v)) for v in row] for row in m]


def _check_pairs(prefs: Pairs, k: int) -> int:
    """Every pair a < b present, every array with the same number of prompts; returns it."""
    if k < 2:
        raise ValueError(f"a tournament needs at least 2 policies, got {k}")
    expected = {(a, b) for a in range(k) for b in range(a + 1, k)}
    if set(prefs) != expected:
        missing = sorted(expected - set(prefs))
        extra = sorted(set(prefs) - expected)
        raise ValueError(
            f"pairs must be exactly (a, b) with a < b < {k}: missing {missing}, unexpected {extra}"
        )
    counts = {pair: np.asarray(v).shape[0] for pair, v in prefs.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"every pair needs the same prompts; rows per pair: {counts}")
    for pair, v in prefs.items():
        v = np.asarray(v, dtype=np.float64)
        if not np.isfinite(v).all() or (v < 0).any() or (v > 1).any():
            raise ValueError(f"pair {pair}: preferences must be finite and lie in [0, 1]")
    return next(iter(counts.values()))


def win_rate_matrix(
    prefs: Pairs, k: int, level: float = 0.95, method: Method = "t", seed: int = 0
) -> WinRates:
    """The k × k matrix of P(a ≻ b) from per-comparison preferences of the pairs a < b."""
    n = _check_pairs(prefs, k)
    mean = np.full((k, k), 0.5)
    low, high = mean.copy(), mean.copy()
    prompt_rates = np.full((k, k, n), 0.5)
    for (a, b), values in prefs.items():
        est = mean_interval(values, level, method, (0.0, 1.0), seed=seed)
        mean[a, b], low[a, b], high[a, b] = est.mean, est.low, est.high
        mean[b, a], low[b, a], high[b, a] = 1 - est.mean, 1 - est.high, 1 - est.low
        prompt_rates[a, b] = per_prompt(values)
        prompt_rates[b, a] = 1 - prompt_rates[a, b]
    rest = [
        mean_interval(
            np.delete(prompt_rates[a], a, axis=0).mean(axis=0),
            level,
            method,
            (0.0, 1.0),
            seed=seed,
        )
        for a in range(k)
    ]
    worst, opponent = worst_case(prompt_rates, level, seed=seed)
    response = [
        mean_interval(np.delete(prompt_rates[a], a, axis=0).min(axis=0), level, method, (0, 1))
        for a in range(k)
    ]
    return WinRates(mean, low, high, n, rest, worst, opponent, response)


def worst_case(
    prompt_rates: np.ndarray, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[list[Estimate], list[int]]:
    """Each policy's lowest win rate against another entrant, and which entrant.

    ``prompt_rates`` is (k, k, prompts) of per-prompt P(a ≻ b).  The estimate is
    min_{b≠a} of the means over prompts; its interval is a seeded percentile bootstrap over
    prompts of that minimum (the opponent re-chosen in every resample, so the interval
    carries the selection).  Against one fixed policy the best mixed response over the
    entrants is a pure one, so this is also its win rate against the restricted game's best
    response.
    """
    k, _, n = prompt_rates.shape
    means = prompt_rates.mean(axis=2)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(resamples, n))
    out, opponents = [], []
    for a in range(k):
        others = np.delete(prompt_rates[a], a, axis=0)  # (k − 1, prompts)
        row = np.delete(means[a], a)
        b = int(np.argmin(row))
        low = high = float("nan")
        if n >= 2:
            boot = others[:, picks].mean(axis=2).min(axis=0)
            low, high = (float(q) for q in np.quantile(boot, [0.5 - level / 2, 0.5 + level / 2]))
        out.append(Estimate(float(row[b]), low, high, n))
        opponents.append(b + (b >= a))
    return out, opponents


def winners(prefs: np.ndarray, tol: float = 1e-6) -> np.ndarray:
    """+1 where a wins (P > ½), −1 where b wins, 0 for a tie (|P − ½| ≤ tol)."""
    d = np.asarray(prefs, dtype=np.float64) - 0.5
    return np.where(np.abs(d) <= tol, 0, np.sign(d)).astype(np.int8)


@dataclass(frozen=True)
class Disagreement:
    """Where two judges differ on the same comparisons (the reward-hacking signal)."""

    difference: np.ndarray
    """(k, k) P_first(a ≻ b) − P_second(a ≻ b); antisymmetric, 0 on the diagonal."""
    difference_low: np.ndarray
    difference_high: np.ndarray
    different_winner: np.ndarray
    """(k, k) fraction of comparisons where the judges pick different winners (symmetric;
    a tie under one judge and a win under the other counts as different); NaN on the
    diagonal."""
    overall: Estimate
    """fraction of different winners over all pairs' comparisons (each prompt's comparisons
    of every pair averaged first), with its interval over prompts."""

    def as_dict(self) -> dict:
        return {
            "difference": _matrix(self.difference),
            "difference_low": _matrix(self.difference_low),
            "difference_high": _matrix(self.difference_high),
            "different_winner": _matrix(self.different_winner),
            "overall_different_winner": self.overall.as_dict(),
        }


def disagreement(
    first: Pairs, second: Pairs, k: int, level: float = 0.95, method: Method = "t", seed: int = 0
) -> Disagreement:
    """Compare two judges' preferences on the same comparisons (same pairs, same shapes)."""
    n = _check_pairs(first, k)
    if _check_pairs(second, k) != n:
        raise ValueError("the two judges were given different numbers of prompts")
    diff = np.zeros((k, k))
    diff_low, diff_high = diff.copy(), diff.copy()
    different = np.full((k, k), np.nan)
    per_pair = []
    for pair in sorted(first):
        p1 = np.asarray(first[pair], dtype=np.float64)
        p2 = np.asarray(second[pair], dtype=np.float64)
        if p1.shape != p2.shape:
            raise ValueError(
                f"pair {pair}: the judges saw {p1.shape} and {p2.shape} comparisons; "
                "they must judge the same ones"
            )
        a, b = pair
        est = mean_interval(p1 - p2, level, method, seed=seed)
        diff[a, b], diff_low[a, b], diff_high[a, b] = est.mean, est.low, est.high
        diff[b, a], diff_low[b, a], diff_high[b, a] = -est.mean, -est.high, -est.low
        flips = (winners(p1) != winners(p2)).astype(np.float64)
        different[a, b] = different[b, a] = float(flips.mean())
        per_pair.append(per_prompt(flips))
    overall = mean_interval(np.mean(per_pair, axis=0), level, method, (0.0, 1.0), seed=seed)
    return Disagreement(diff, diff_low, diff_high, different, overall)


@dataclass(frozen=True)
class LengthControlled:
    """P(row ≻ column) had the two completions been equally long, with a bootstrap interval.

    Per pair, a logistic regression of the judge's P on tanh(Δlength / sd) (Δ: row's minus
    column's tokens of each comparison, sd: their pooled standard deviation over the whole
    tournament), fitted by cross-entropy (soft labels); the win rate is the fit at Δ = 0,
    σ(intercept) (the construction of AlpacaEval's length-controlled win rate, without its
    per-model terms).  ``slope[a, b]`` is the fitted weight of length (> 0: the judge favours
    the longer completion)."""

    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    slope: np.ndarray
    n_prompts: int

    def as_dict(self) -> dict:
        return {
            "win_rate": _matrix(self.mean),
            "low": _matrix(self.low),
            "high": _matrix(self.high),
            "length_slope": _matrix(self.slope),
            "n_prompts": self.n_prompts,
        }


def _logistic_fit(p: np.ndarray, z: np.ndarray, ridge: float = 1e-6) -> tuple[float, float]:
    """(intercept, slope) minimizing Σ CE(p, σ(a + b·z)) + ridge·b²/2 over rows, by Newton."""
    X = np.stack([np.ones_like(z), z], axis=1)
    beta = np.zeros(2)
    penalty = np.diag([0.0, ridge * len(z)])
    for _ in range(50):
        w = 1.0 / (1.0 + np.exp(-(X @ beta)))
        grad = X.T @ (w - p) + penalty @ beta
        hess = X.T @ (X * (w * (1 - w))[:, None]) + penalty + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(beta[0]), float(beta[1])


def length_controlled(
    prefs: Pairs,
    length_gaps: Pairs,
    k: int,
    level: float = 0.95,
    resamples: int = 200,
    seed: int = 0,
) -> LengthControlled:
    """:class:`LengthControlled` from the per-comparison preferences of the pairs a < b and
    the length gaps of the same comparisons (same shapes); the interval is a seeded
    percentile bootstrap over prompts."""
    n = _check_pairs(prefs, k)
    sd = float(np.concatenate([np.ravel(v) for v in length_gaps.values()]).std()) or 1.0
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    mean, low, high = (np.full((k, k), 0.5) for _ in range(3))
    slope = np.zeros((k, k))
    for (a, b), values in prefs.items():
        p = np.asarray(values, dtype=np.float64).reshape(n, -1)
        z = np.tanh(np.asarray(length_gaps[(a, b)], dtype=np.float64).reshape(n, -1) / sd)
        intercept, slope[a, b] = _logistic_fit(p.ravel(), z.ravel())
        slope[b, a] = slope[a, b]
        boot = [_logistic_fit(p[rows].ravel(), z[rows].ravel())[0] for rows in draws]
        q = np.quantile(boot, [0.5 - level / 2, 0.5 + level / 2]) if n >= 2 else [np.nan] * 2
        mean[a, b], low[a, b], high[a, b] = (1 / (1 + np.exp(-x)) for x in (intercept, *q))
        mean[b, a], low[b, a], high[b, a] = 1 - mean[a, b], 1 - high[a, b], 1 - low[a, b]
    return LengthControlled(mean, low, high, slope, n)
