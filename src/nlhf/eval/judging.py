"""Judge every pair of policies on the same prompts: per-comparison preferences P(a ≻ b).

    from nlhf.eval.judging import judge_tournament
    verdict = judge_tournament(judge, "vader", prompts, completions, pairing="all")
    verdict.prefs[(0, 1)]     # (prompts, comparisons) of P(policy 0 ≻ policy 1)
    verdict.scores            # per policy (prompts, samples) judge scores, or None

Which completions are compared, for each prompt and pair a < b of policies with S samples:
``pairing="all"`` compares every sample of a with every sample of b (S² comparisons),
``"aligned"`` sample j of a with sample j of b (S comparisons).  A score judge
(:class:`nlhf.models.judges.ScoreJudge`: VADER, a reward model) scores each completion once
and derives every comparison from the scores, so "all" costs nothing extra; a pairwise
judge (a preference model) is called once per comparison, in batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from nlhf.eval.rollouts import Completions
from nlhf.models.judges import ScoreJudge

Pairing = Literal["all", "aligned"]


@dataclass
class Verdict:
    """One judge's view of a tournament."""

    name: str
    prefs: dict[tuple[int, int], np.ndarray]
    """for a < b: (prompts, comparisons) of P(a ≻ b)."""
    scores: list[np.ndarray] | None
    """per policy: (prompts, samples) scores; None for a pairwise judge."""


def is_score_judge(judge: Any) -> bool:
    """A ScoreJudge whose preference is exactly σ(scale·(s(a) − s(b)))."""
    return isinstance(judge, ScoreJudge) and type(judge).__call__ is ScoreJudge.__call__


def comparison_index(samples: int, pairing: Pairing) -> tuple[np.ndarray, np.ndarray]:
    """Sample indices (ja, jb) of the comparisons made for one prompt."""
    if pairing == "all":
        ja, jb = np.meshgrid(np.arange(samples), np.arange(samples), indexing="ij")
        return ja.ravel(), jb.ravel()
    if pairing == "aligned":
        return np.arange(samples), np.arange(samples)
    raise ValueError(f"pairing must be 'all' or 'aligned', got {pairing!r}")


def count_comparisons(judge: Any, k: int, prompts: int, samples: int, pairing: Pairing) -> int:
    """Judge calls on single items: completions scored, or comparisons judged."""
    if is_score_judge(judge):
        return k * prompts * samples
    return k * (k - 1) // 2 * prompts * len(comparison_index(samples, pairing)[0])


def _score_all(
    judge: Any, prompts: list[str], completions: Completions, batch_size: int, advance
) -> np.ndarray:
    n, S = len(prompts), len(completions.texts[0])
    flat_prompts = [p for p in prompts for _ in range(S)]
    flat_texts = [t for row in completions.texts for t in row]
    out = []
    for start in range(0, len(flat_texts), batch_size):
        stop = start + batch_size
        scores = judge.scores(flat_prompts[start:stop], flat_texts[start:stop])
        out.append(np.asarray(scores.detach().float().cpu(), dtype=np.float64).reshape(-1))
        advance(len(flat_texts[start:stop]))
    return np.concatenate(out).reshape(n, S)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def judge_tournament(
    judge: Any,
    name: str,
    prompts: Sequence[str],
    completions: list[Completions],
    pairing: Pairing = "all",
    batch_size: int = 64,
    advance: Callable[[int], None] | None = None,
) -> Verdict:
    """Every pair a < b of policies compared on every prompt (see the module doc)."""
    prompts = list(prompts)
    advance = advance or (lambda _: None)
    k, n = len(completions), len(prompts)
    S = len(completions[0].texts[0])
    for c in completions:
        if len(c.texts) != n or any(len(row) != S for row in c.texts):
            raise ValueError(f"{c.name}: expected {n} prompts × {S} completions")
    ja, jb = comparison_index(S, pairing)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    if is_score_judge(judge):
        scores = [_score_all(judge, prompts, c, batch_size, advance) for c in completions]
        prefs = {
            (a, b): _sigmoid(judge.scale * (scores[a][:, ja] - scores[b][:, jb])) for a, b in pairs
        }
        return Verdict(name, prefs, scores)

    within = list(zip(ja.tolist(), jb.tolist(), strict=True))
    jobs = [(a, b, i, x, y) for a, b in pairs for i in range(n) for x, y in within]
    values = np.empty(len(jobs))
    for start in range(0, len(jobs), batch_size):
        part = jobs[start : start + batch_size]
        p = judge(
            [prompts[i] for _, _, i, _, _ in part],
            [completions[a].texts[i][x] for a, _, i, x, _ in part],
            [completions[b].texts[i][y] for _, b, i, _, y in part],
        )
        values[start : start + len(part)] = np.asarray(p.detach().float().cpu()).reshape(-1)
        advance(len(part))
    values = np.clip(values, 0.0, 1.0).reshape(len(pairs), n, len(ja))
    return Verdict(name, {pair: values[m] for m, pair in enumerate(pairs)}, None)
