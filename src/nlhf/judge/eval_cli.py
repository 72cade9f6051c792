"""``nlhf judge eval``: check a judge on labelled preference pairs before optimizing against it.

    nlhf judge eval --judge vader --data imdb max_pairs=200
    nlhf judge eval --judge runs/rm/model --judge2 vader --data held_out.jsonl --show 10
    nlhf judge eval --judge path/to/instruct-lm --data hh judge_device=cuda

1. the pairs of ``--data`` (hh, imdb or a file), at most ``max_pairs`` of them, seeded;
2. each judge asked about every pair, ``judge_batch_size`` pairs per call;
3. accuracy, calibration, position and length bias per judge, and with ``--judge2`` the two
   judges' agreement (:mod:`nlhf.judge.evaluation` defines them all);
4. ``metrics.json`` and ``report.md`` in ``--out``, and a summary on stdout.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from nlhf import data
from nlhf.config import ConfigError, option, to_dict
from nlhf.data.chat import render_prompt
from nlhf.data.loader import check_source
from nlhf.data.movie_reviews import review_pairs
from nlhf.files import check_folder_option
from nlhf.judge.eval_report import write_report
from nlhf.judge.evaluation import (
    agreement,
    disagreements,
    judge_metrics,
    judge_pairs,
    longer_wins,
    picks,
    weighted_kappa,
)
from nlhf.models.judges import load_judge
from nlhf.models.judges.load import JUDGE_HELP, JudgeFields

DATA_SETS = ("hh", "imdb")
"""The pair sets that ``data`` names without a file."""

JUDGE_KINDS = JUDGE_HELP.split(": ", 1)[1]


@dataclass
class Config(JudgeFields):
    """Check a judge on labelled preference pairs: accuracy with its 95% interval, log loss,
    calibration, position bias (pairwise LM judges), length bias, and with --judge2 how
    often two judges agree.  Writes report.md and metrics.json to --out."""

    judge: str = option("", "the judge to check (required): " + JUDGE_KINDS)
    judge2: str = option(
        "", "a second judge to compare with the first (same kinds of spec; empty: none)"
    )
    data: str = option(
        "hh",
        "labelled pairs to check on: hh (Anthropic HH harmless, packaged), imdb (movie-reviews "
        "package: a positive review ≻ a negative one) or a .jsonl/.csv file of prompt, chosen, "
        "rejected",
    )
    max_pairs: int | None = option(1000, "check at most this many pairs, drawn seeded (none: all)")
    imdb_words: int = option(64, "imdb only: keep the first this many words of each review")
    skip_bad_rows: bool = option(False, "skip and count malformed rows instead of stopping")
    seed: int = option(0, "seed of the pairs drawn (and of imdb's pairing of reviews)")
    out: str = option("runs/judge-eval", "output folder: report.md, metrics.json")
    show: int = option(5, "with --judge2: list this many pairs where the two judges disagree")
    progress: bool = option(True, "show a progress bar")

    def check(self) -> None:
        if not self.judge:
            raise ValueError("judge: give the judge to check: " + JUDGE_KINDS)
        if self.max_pairs is not None and self.max_pairs < 1:
            raise ValueError(f"max_pairs must be ≥ 1 or none, got {self.max_pairs}")
        self.at_least(0, "show")
        check_source("data", self.data, DATA_SETS)
        check_folder_option("out", self.out)


def load_eval_pairs(config: Config) -> Any:
    """The PreferenceDataset to check the judges on (step 1)."""
    if config.data == "imdb":
        try:
            return review_pairs(config.max_pairs, words=config.imdb_words, seed=config.seed)
        except ValueError as exc:  # more pairs asked than there are, or too few words
            options = f"max_pairs={config.max_pairs}, imdb_words={config.imdb_words}"
            raise ConfigError(f"data imdb ({options}): {exc}") from None
    if config.data == "hh":
        pairs = data.load_hh_harmless()
    else:
        pairs = data.load_pairs(config.data, skip_bad_rows=config.skip_bad_rows)
        if pairs.skipped:
            print(f"{config.data}: {pairs.skipped.summary()}")
    if config.max_pairs is None or len(pairs) <= config.max_pairs:
        return pairs
    keep = np.random.default_rng(config.seed).choice(len(pairs), config.max_pairs, replace=False)
    return type(pairs)((pairs[int(i)] for i in sorted(keep)), name=pairs.name)


def evaluate(config: Config) -> dict[str, Any]:
    """Steps 1–3: the result that becomes metrics.json."""
    start = time.perf_counter()
    pairs = load_eval_pairs(config)
    prompts = [render_prompt(p.prompt) for p in pairs]
    chosen, rejected = [p.chosen for p in pairs], [p.rejected for p in pairs]
    longer = longer_wins(chosen, rejected)
    specs = [config.judge, *([config.judge2] if config.judge2 else [])]
    verdicts = []
    for spec in specs:
        judge = load_judge(spec, config.judge_options())
        verdicts.append(
            judge_pairs(
                judge, prompts, chosen, rejected, config.judge_batch_size, config.progress, spec
            )
        )
    both = None
    if len(verdicts) == 2:
        p, q = verdicts[0].p, verdicts[1].p
        kappa = weighted_kappa(picks(p), picks(q))
        both = {
            "share": agreement(picks(p), picks(q)),
            "kappa": None if math.isnan(kappa) else kappa,
            "disagreements": [
                {
                    "pair": i,
                    "prompt": prompts[i],
                    "chosen": chosen[i],
                    "rejected": rejected[i],
                    "p": [float(p[i]), float(q[i])],
                }
                for i in disagreements(p, q, config.show)
            ],
        }
    return {
        "data": config.data,
        "pairs": len(pairs),
        "seed": config.seed,
        "labels_longer": float(longer.mean()),
        "judges": [
            {"spec": spec, **judge_metrics(v, longer)}
            for spec, v in zip(specs, verdicts, strict=True)
        ],
        "agreement": both,
        "seconds": time.perf_counter() - start,
        "config": to_dict(config),
    }


def summary(result: dict[str, Any]) -> list[str]:
    """The lines printed on stdout."""
    lines = []
    for j in result["judges"]:
        low, high = j["accuracy_ci95"]
        bias = j["position_bias"]
        lines.append(
            f"{j['spec']} on {result['data']} ({j['pairs']} pairs): accuracy "
            f"{j['accuracy']:.3f} [{low:.3f}, {high:.3f}], log loss {j['log_loss']:.3f}, "
            f"ECE {j['ece']:.3f}, position bias "
            f"{'n/a' if bias is None else format(bias['mean'], '+.3f')}, picks the longer "
            f"response {j['picks_longer']:.3f} (the labels: {result['labels_longer']:.3f})"
        )
    both = result["agreement"]
    if both is not None:
        kappa = "–" if both["kappa"] is None else f"{both['kappa']:.3f}"
        lines.append(f"the two judges pick alike in {both['share']:.3f} of pairs (κ {kappa})")
    return lines


def run(config: Config) -> int:
    result = evaluate(config)
    write_report(result, config.out)
    print("\n".join(summary(result)))
    print(f"report: {config.out}/report.md (and metrics.json)")
    return 0
