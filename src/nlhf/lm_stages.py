"""The stages that language-model runs (``nlhf demo``, ``nlhf experiment``) share, for the
stage lists of :class:`nlhf.resumable.Run`:

- :func:`write_prompts`: disjoint IMDB review openings, as many to each file as it asks;
- :func:`judge_configs` and :func:`train_judges`: the reward model and the preference model
  on the same pairs, held-out split, encoder, dtype and seed, each trained once;
- :func:`tournament`: :func:`nlhf.eval.run_tournament` against the run's reference policy;
- :func:`frontier`: :func:`nlhf.eval.frontier.run_frontier` of the run's trainers' checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nlhf.assets import resolve_model
from nlhf.data.movie_reviews import review_prompts
from nlhf.data.prompts import PromptFields
from nlhf.eval import run_tournament
from nlhf.eval.frontier import Frontier, run_frontier
from nlhf.eval.rollouts import Sampling
from nlhf.models.judges import load_judge
from nlhf.resumable import RunFolder
from nlhf.train import preference_model, reward_model


def write_prompts(seed: int, files: dict[Path, int]) -> None:
    """Disjoint IMDB review openings of the trainers' default length, as many to each file as
    it asks, in order."""
    pool = review_prompts(sum(files.values()), words=PromptFields().prompt_words, seed=seed)
    start = 0
    for path, n in files.items():
        pool[start : start + n].to_jsonl(path)
        start += n


def judge_configs(config: Any, layout: RunFolder, **data: Any) -> dict[str, Any]:
    """The reward-model and preference-model configs of a run: the same pairs (``data``: the
    judge trainers' data fields) and held-out split, the run's encoder, dtype and seed."""
    shared = dict(
        backbone=config.encoder,
        max_length=config.judge_max_length,
        dtype=config.dtype,
        seed=config.seed,
        progress=config.progress,
        **data,
    )
    return {
        "reward-model": reward_model.Config(out=str(layout.judge("reward-model")), **shared),
        "preference-model": preference_model.Config(
            out=str(layout.judge("preference-model")), rank=config.pm_rank, **shared
        ),
    }


def train_judges(configs: dict[str, Any]) -> dict[str, Any]:
    """Train each judge of :func:`judge_configs` whose folder has no ``metrics.json`` yet;
    the held-out accuracy of each."""
    runners = {"reward-model": reward_model.run, "preference-model": preference_model.run}
    accuracy = {}
    for kind, judge_config in configs.items():
        metrics = Path(judge_config.out) / "metrics.json"
        if not metrics.exists():
            runners[kind](judge_config)
        accuracy[kind] = json.loads(metrics.read_text())["held_out"]["accuracy"]
    return {"held_out_accuracy": accuracy}


def sampling_of(config: Any, samples_per_prompt: int, **options: Any) -> Sampling:
    """How a run's stages sample: its tokens per completion, seed and dtype (``options``: any
    other :class:`~nlhf.eval.rollouts.Sampling` field)."""
    return Sampling(
        samples_per_prompt=samples_per_prompt,
        max_new_tokens=config.max_new_tokens,
        seed=config.seed,
        dtype=config.dtype,
        **options,
    )


def tournament(
    config: Any,
    entrants: list[str],
    prompts: list[str],
    judges: Any,
    samples_per_prompt: int,
    show_samples: int,
    out: Path | None = None,
) -> Any:
    """:func:`nlhf.eval.run_tournament` of ``entrants`` on ``prompts`` against the run's
    reference policy, sampled with the run's tokens per completion, seed and dtype."""
    return run_tournament(
        entrants,
        prompts,
        judges,
        reference=resolve_model(config.policy, "policy"),
        sampling=sampling_of(config, samples_per_prompt),
        show_samples=show_samples,
        progress=config.progress,
        out=out,
    )


def frontier(
    config: Any,
    runs: list[str],
    prompts: list[str],
    judge: str,
    samples_per_prompt: int,
    targets: list[float],
    best_of_n: list[int],
    out: Path,
) -> Frontier:
    """:func:`nlhf.eval.frontier.run_frontier` of ``runs`` (``FAMILY#SEED=FOLDER``) on
    ``prompts`` under the judge ``judge`` (a spec), against the run's reference policy and
    with its tokens per completion, seed and dtype."""
    return run_frontier(
        runs,
        prompts,
        load_judge(judge),
        judge,
        reference=resolve_model(config.policy, "policy"),
        sampling=sampling_of(config, samples_per_prompt),
        targets=targets,
        bon=best_of_n,
        progress=config.progress,
        out=out,
    )
