"""The tournament: sample each policy once, let each judge compare every pair, summarize.

    from nlhf.eval import run_tournament
    from nlhf.models.judges import FunctionJudge
    result = run_tournament(
        ["reference", "ppo=runs/ppo/policy", "nash=runs/nash-md/policy"],
        prompts,                                       # list of prompt texts
        judges=["vader", FunctionJudge(lambda p, y: -len(y))],   # specs or judge objects
        out="runs/tournament",                          # tournament.json, .md, heatmap.png
    )
    result.win_rates["vader"].mean        # (k, k) P(row ≻ column)

Per judge: the k × k matrix of P(row ≻ column), each entry the mean over prompts of the
per-prompt average preference over that prompt's comparisons, with a confidence interval
over prompts (:mod:`nlhf.eval.stats`); per policy: its mean win rate against the others, its
worst case (lowest P against one other entrant) and its P against the per-prompt best
response, the mean score under every score judge, the exact KL to the reference (and the
sampled estimate), the completion length and a few completions; per judge also the
length-controlled matrix (the win rates had the completions been equally long:
:func:`nlhf.eval.stats.length_controlled`).  With two or more judges,
every pair of judges gets a disagreement report.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nlhf.eval.entrants import Entrant, default_name, parse_entrants

if TYPE_CHECKING:
    from nlhf.models.judges.base import JudgeOptions
from tqdm.auto import tqdm

from nlhf.eval.judging import (
    Pairing,
    Verdict,
    comparison_index,
    count_comparisons,
    judge_tournament,
)
from nlhf.eval.report import write_report
from nlhf.eval.rollouts import Completions, Sampling, sample_entrants
from nlhf.eval.stats import (
    Disagreement,
    Estimate,
    LengthControlled,
    Method,
    WinRates,
    disagreement,
    length_controlled,
    mean_interval,
    win_rate_matrix,
)
from nlhf.models.judges import load_judge


@dataclass
class PolicyStats:
    """What is measured on one policy's own completions."""

    name: str
    spec: str
    kind: str
    kl: Estimate | None
    """exact KL(π‖μ) of its completions (see :mod:`nlhf.eval.rollouts`)."""
    length: Estimate
    """completion tokens (EOS included)."""
    characters: float
    scores: dict[str, Estimate]
    """per score judge: the mean score of the completions."""
    samples: list[dict[str, str]]
    kl_sampled: Estimate | None = None
    """Σ log π − log μ of the sampled tokens: the same KL, estimated from the samples."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "spec": self.spec,
            "kind": self.kind,
            "kl": None if self.kl is None else self.kl.as_dict(),
            "kl_sampled": None if self.kl_sampled is None else self.kl_sampled.as_dict(),
            "length": self.length.as_dict(),
            "characters": self.characters,
            "scores": {k: v.as_dict() for k, v in self.scores.items()},
            "samples": self.samples,
        }


@dataclass
class Tournament:
    """Everything a tournament measured; :meth:`as_dict` is ``tournament.json``."""

    names: list[str]
    entrants: list[Entrant]
    prompts: list[str]
    completions: list[Completions]
    verdicts: list[Verdict]
    win_rates: dict[str, WinRates]
    disagreements: dict[tuple[str, str], Disagreement]
    policies: list[PolicyStats]
    length_controlled: dict[str, LengthControlled] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "policies": [p.as_dict() for p in self.policies],
            "judges": {
                name: {
                    "kind": "score" if v.scores is not None else "pairwise",
                    **self.win_rates[name].as_dict(),
                    **(
                        {"length_controlled": self.length_controlled[name].as_dict()}
                        if name in self.length_controlled
                        else {}
                    ),
                }
                for name, v in zip(self.win_rates, self.verdicts, strict=True)
            },
            "disagreements": [
                {"judges": list(pair), **d.as_dict()} for pair, d in self.disagreements.items()
            ],
            "n_prompts": len(self.prompts),
            "settings": self.settings,
            "seconds": self.seconds,
        }


def judge_names(judges: Sequence[Any] | Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(name, judge or spec) pairs; specs are named after themselves, objects after their
    ``name`` attribute or class; repeated names get a numeric suffix."""
    items = (
        list(judges.items())
        if isinstance(judges, Mapping)
        else [
            (j if isinstance(j, str) else getattr(j, "name", type(j).__name__), j) for j in judges
        ]
    )
    if not items:
        raise ValueError("give at least one judge")
    named, seen = [], {}
    for name, judge in items:
        name = default_name(name) if isinstance(judge, str) else str(name)
        seen[name] = seen.get(name, 0) + 1
        named.append((name if seen[name] == 1 else f"{name}#{seen[name]}", judge))
    return named


def policy_stats(
    entrant: Entrant,
    completions: Completions,
    prompts: list[str],
    verdicts: list[Verdict],
    index: int,
    level: float,
    method: Method,
    show_samples: int,
) -> PolicyStats:
    kl = None if completions.kl is None else mean_interval(completions.kl, level, method)
    sampled = completions.kl_sampled
    kl_sampled = None if sampled is None else mean_interval(sampled, level, method)
    return PolicyStats(
        name=entrant.name,
        spec=entrant.spec,
        kind=entrant.kind,
        kl=kl,
        length=mean_interval(completions.lengths, level, method),
        characters=float(np.mean([len(t) for row in completions.texts for t in row])),
        scores={
            v.name: mean_interval(v.scores[index], level, method)
            for v in verdicts
            if v.scores is not None
        },
        samples=[
            {"prompt": prompts[i], "completion": completions.texts[i][0]}
            for i in range(min(show_samples, len(prompts)))
        ],
        kl_sampled=kl_sampled,
    )


def judge_all(
    judges: list[tuple[str, Any]],
    prompts: list[str],
    completions: list[Completions],
    samples: int,
    pairing: Pairing,
    batch_size: int,
    progress: bool,
) -> list[Verdict]:
    """Every (name, judge)'s verdict on every comparison, under one progress bar."""
    k = len(completions)
    total = sum(count_comparisons(j, k, len(prompts), samples, pairing) for _, j in judges)
    bar = tqdm(total=total, desc="judging", unit="item", disable=not progress)
    verdicts = []
    for name, judge in judges:
        bar.set_postfix_str(name)
        verdicts.append(
            judge_tournament(judge, name, prompts, completions, pairing, batch_size, bar.update)
        )
    bar.close()
    return verdicts


def run_tournament(
    policies: Sequence[str],
    prompts: Sequence[str],
    judges: Sequence[Any] | Mapping[str, Any] = ("vader",),
    *,
    reference: str = "",
    sampling: Sampling | None = None,
    pairing: Pairing = "all",
    level: float = 0.95,
    interval: Method = "t",
    show_samples: int = 3,
    judge_batch_size: int = 64,
    judge_options: JudgeOptions | None = None,
    progress: bool = True,
    out: str | Path | None = None,
) -> Tournament:
    """Sample, judge and summarize; with ``out``, write the report files there.

    ``policies``: specs as in :mod:`nlhf.eval.entrants`; ``judges``: specs for
    :func:`nlhf.models.judges.load_judge` (read with ``judge_options``), judge objects, or a
    mapping name → judge; ``reference``: the reference policy (empty: the base model of the
    first LoRA adapter).
    """
    sampling = sampling or Sampling()
    prompts = list(prompts)
    if not prompts:
        raise ValueError("no prompts given")
    named = judge_names(judges)
    entrants, ref_path = parse_entrants(list(policies), reference)
    loaded = [(n, load_judge(j, judge_options) if isinstance(j, str) else j) for n, j in named]

    t0 = time.perf_counter()
    completions = sample_entrants(entrants, ref_path, prompts, sampling, progress)
    t1 = time.perf_counter()
    S = sampling.samples_per_prompt
    verdicts = judge_all(loaded, prompts, completions, S, pairing, judge_batch_size, progress)
    t2 = time.perf_counter()
    k = len(entrants)
    ja, jb = comparison_index(S, pairing)
    gaps = {
        (a, b): completions[a].lengths[:, ja] - completions[b].lengths[:, jb]
        for a in range(k)
        for b in range(a + 1, k)
    }
    result = Tournament(
        names=[e.name for e in entrants],
        entrants=entrants,
        prompts=prompts,
        completions=completions,
        verdicts=verdicts,
        win_rates={v.name: win_rate_matrix(v.prefs, k, level, interval) for v in verdicts},
        disagreements={
            (a.name, b.name): disagreement(a.prefs, b.prefs, k, level, interval)
            for i, a in enumerate(verdicts)
            for b in verdicts[i + 1 :]
        },
        policies=[
            policy_stats(e, c, prompts, verdicts, i, level, interval, show_samples)
            for i, (e, c) in enumerate(zip(entrants, completions, strict=True))
        ],
        length_controlled={v.name: length_controlled(v.prefs, gaps, k, level) for v in verdicts},
        settings={
            "reference": ref_path,
            "pairing": pairing,
            "level": level,
            "interval": interval,
            "comparisons_per_prompt_and_pair": S * S if pairing == "all" else S,
            **asdict(sampling),
        },
        seconds={"sampling": t1 - t0, "judging": t2 - t1},
    )
    if out is not None:
        write_report(result, out)
    return result
