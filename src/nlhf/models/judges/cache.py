"""A cache in front of any judge: comparisons (or scores) already judged are not recomputed.

    judge = cached(load_judge("runs/pm/model"))
    judge(prompts, a, b)            # judged
    judge(prompts, b, a)            # from the cache: 1 − the answers above, no forward
    judge.hits, judge.misses

A score judge caches one score per (prompt, completion), so a K × K matrix of comparisons
costs K scores; any other judge caches P per (prompt, a, b) and knows (prompt, b, a) from it.
Only comparisons missing from the cache reach the judge, each once per call.  The cache keeps
the ``max_items`` newest entries, each a 16-byte digest of its texts and a float, so it holds
about 10 MB at most however long the texts are.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

from nlhf.models.judges.base import Judge, ScoreJudge, check


def digest(texts: tuple[str, ...]) -> bytes:
    """The cache key of ``texts`` (their ``repr`` tells ("ab", "c") from ("a", "bc"))."""
    return hashlib.blake2b(repr(texts).encode(), digest_size=16).digest()


class _Memo:
    def __init__(self, max_items: int) -> None:
        self.values: OrderedDict[bytes, float] = OrderedDict()
        self.max_items, self.hits, self.misses = max_items, 0, 0

    def lookup(self, rows: Sequence[tuple[str, ...]], compute) -> torch.Tensor:
        """Values of ``rows``; ``compute(missing rows) -> tensor`` fills the gaps."""
        keys = [digest(row) for row in rows]
        missing = {k: row for k, row in zip(keys, rows, strict=True) if k not in self.values}
        self.hits += len(keys) - sum(1 for k in keys if k in missing)
        self.misses += len(missing)
        if missing:
            for key, value in zip(missing, compute(list(missing.values())).tolist(), strict=True):
                self.store(key, value)
        return torch.tensor([self.values[k] for k in keys], dtype=torch.float32)

    def store(self, key: bytes, value: float) -> None:
        self.values[key] = value
        self.values.move_to_end(key)
        while len(self.values) > self.max_items:
            self.values.popitem(last=False)


class _Wrapper:
    """What both caches share: the counts, and the wrapped judge's other attributes."""

    judge: Any
    _memo: _Memo

    @property
    def hits(self) -> int:
        return self._memo.hits

    @property
    def misses(self) -> int:
        return self._memo.misses

    def __getattr__(self, name: str) -> Any:  # both_orders, model, … of the judge inside
        if name in ("judge", "_memo"):
            raise AttributeError(name)
        return getattr(self.judge, name)


class CachedJudge(_Wrapper):
    """A pairwise judge behind a cache of P(a ≻ b | x) (and its mirror image)."""

    def __init__(self, judge: Judge, max_items: int = 50_000) -> None:
        self.judge, self._memo = judge, _Memo(max_items)

    def __call__(self, prompts, a, b) -> torch.Tensor:
        check(prompts, a, b)

        def compute(rows: list[tuple[str, str, str]]) -> torch.Tensor:
            p = self.judge(*(list(column) for column in zip(*rows, strict=True)))
            for (x, y, z), value in zip(rows, p.tolist(), strict=True):
                self._memo.store(digest((x, z, y)), 1.0 - value)
            return p

        return self._memo.lookup(list(zip(prompts, a, b, strict=True)), compute)


class CachedScoreJudge(_Wrapper, ScoreJudge):
    """A score judge behind a cache of s(prompt, completion)."""

    def __init__(self, judge: ScoreJudge, max_items: int = 50_000) -> None:
        super().__init__(judge.scale)
        self.judge, self._memo = judge, _Memo(max_items)

    def scores(self, prompts, completions) -> torch.Tensor:
        def compute(rows: list[tuple[str, str]]) -> torch.Tensor:
            xs, ys = zip(*rows, strict=True)
            return self.judge.scores(list(xs), list(ys)).float().cpu()

        return self._memo.lookup(list(zip(prompts, completions, strict=True)), compute)


def cached(judge: Judge, max_items: int = 50_000) -> Judge:
    """``judge`` behind the cache that suits it (scores for a score judge)."""
    if isinstance(judge, CachedJudge | CachedScoreJudge):
        return judge
    if isinstance(judge, ScoreJudge):
        return CachedScoreJudge(judge, max_items)
    return CachedJudge(judge, max_items)
