"""The stages of ``nlhf experiment decoy`` and ``cycle`` in order (:func:`stages`), each one
idempotent: a finished stage is skipped, an interrupted one starts again (the trainers continue
from their checkpoints).

1. ``question``: the forced choice as the policy reads it; ``reference types``: the
   reference's completions and their types (μ, and the pools the judges' pairs come from);
2. ``predictions``: every cell's exact prediction (:mod:`nlhf.tabular.lottery`), written to
   ``predictions.json`` before anything trains;
3. per seed, per cell: ``labels`` (pairs whose types are drawn from the cell's pair
   distribution, each labelled by one annotator drawn from the population), ``judges``
   (reward and preference model), ``train <route>`` for every route, ``measure`` (each
   policy's type counts, the learned judges read per type).  The stages of seed ``seed + k``
   for k ≥ 1 carry `` seedK`` in their names and write to the cell's folder of that seed.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from nlhf.assets import resolve_model
from nlhf.eval.entrants import parse_entrants
from nlhf.eval.rollouts import sample_entrants, sample_policy, spec_salt
from nlhf.experiment.choice import (
    TypePreference,
    TypeReward,
    completion_type,
    render_question,
    type_counts,
)
from nlhf.experiment.choice_config import ChoiceConfig, ChoiceLayout, CycleConfig
from nlhf.experiment.choice_plan import (
    LEARNED_JUDGE,
    cell_game,
    cell_judge_configs,
    cell_rankings,
    route_configs,
)
from nlhf.files import atomic_write_json, atomic_write_text
from nlhf.lm_stages import sampling_of, train_judges
from nlhf.models.judges import JudgeOptions, load_judge
from nlhf.models.lm import load_causal_lm, load_tokenizer
from nlhf.reporting import read_metrics, tail_mean
from nlhf.resumable import RunFolder, Stages
from nlhf.tabular.lottery import predict, smoothed_shares
from nlhf.train import ppo
from nlhf.train.nash_md import NashMDPG
from nlhf.train.online import Trainer
from nlhf.train.online_dpo import OnlineDPO

LIMIT = 0.005
"""τ = β of the prediction's small-regularization limit, shown beside the cell's own."""

JUDGE_PROBES = 6
"""Reference completions per type on which the learned judges are read."""

COUNT_BATCH = 256
"""Completions decoded together where a policy's types are counted: a few tokens of one
question, whose prompt is run once, so wide batches keep the matrix products compute-bound
(each row keeps its own generator: the batch never changes what is drawn)."""


def dial(config: ChoiceConfig) -> str:
    return "lambda" if isinstance(config, CycleConfig) else "rho"


def cell_name(config: ChoiceConfig, value: float) -> str:
    return f"{dial(config)}={value:g}"


def trained_in(config: ChoiceConfig, value: float, route: str) -> float:
    """The cell whose run of ``route`` serves cell ``value``: its own, except for the exact
    Nash control, whose judge is the population's P and not the cell's pairs: the first cell
    with the same P trains it for all (one run for every decoy cell, where P is w's alone)."""
    if route != "nash-md-exact":
        return value
    P = cell_game(config, value)[0]
    return next(v for v in config.cells if np.array_equal(cell_game(config, v)[0], P))


def policy_folder(config: ChoiceConfig, layout: ChoiceLayout, value: float, route: str, k: int):
    """The folder of the policy that cell ``value``'s run from seed ``seed + k`` measures for
    ``route``."""
    return RunFolder(layout.cell(trained_in(config, value, route), k)).policy(route)


def question(layout: ChoiceLayout) -> dict[str, Any]:
    return json.loads(layout.question.read_text())


def reference(layout: ChoiceLayout) -> dict[str, Any]:
    return json.loads(layout.reference.read_text())


# --------------------------------------------------------------------------- 1. the question


def write_question(config: ChoiceConfig, layout: ChoiceLayout) -> None:
    tokenizer = load_tokenizer(resolve_model(config.policy, "policy"))
    text = render_question(tokenizer)
    atomic_write_json(layout.question, {"text": text, "options": list(config.options)})


def sample_reference(config: ChoiceConfig, layout: ChoiceLayout) -> dict[str, Any]:
    """``reference_samples`` completions of the question and their types."""
    model, tokenizer = load_causal_lm(resolve_model(config.policy, "policy"), config.dtype)
    settings = sampling_of(config, config.reference_samples, batch_size=COUNT_BATCH)
    texts = sample_policy(
        model, tokenizer, [question(layout)["text"]], settings, spec_salt("reference"), None, False
    ).texts[0]
    counts = type_counts(texts, config.options)
    types = [completion_type(t, config.options) for t in texts]
    atomic_write_json(
        layout.reference, {"completions": texts, "types": types, "counts": counts.tolist()}
    )
    return {"counts": counts.tolist()}


# --------------------------------------------------------------------------- 2. predictions


def write_predictions(config: ChoiceConfig, layout: ChoiceLayout) -> dict[str, Any]:
    """Every cell's prediction from the exact P, μ (the reference's type shares, half a count
    added to each) and the pair distribution, at the run's τ and its paired β, and in the
    small-regularization limit."""
    mu = smoothed_shares(reference(layout)["counts"])
    cells = {}
    for value in config.cells:
        P, pairs = cell_game(config, value)
        rankings, voter_shares = cell_rankings(config, value)
        cells[f"{value:g}"] = {
            "value": value,
            "rankings": [list(r) for r in rankings],
            "shares": voter_shares,
            "P": P.tolist(),
            "pairs": pairs.tolist(),
            "prediction": predict(P, mu, pairs, config.tau).as_dict(),
            "limit": predict(P, mu, pairs, LIMIT, LIMIT).as_dict(),
        }
    atomic_write_json(layout.predictions, {"mu": mu.tolist(), "dial": dial(config), "cells": cells})
    return {c: round(v["prediction"]["nash_vs_rlhf"], 4) for c, v in cells.items()}


def cell_prediction(layout: ChoiceLayout, value: float) -> dict[str, Any]:
    return json.loads(layout.predictions.read_text())["cells"][f"{value:g}"]


# --------------------------------------------------------------------------- 3. each cell


def pools(config: ChoiceConfig, layout: ChoiceLayout) -> list[list[str]]:
    """The reference's completions of each type; a type it never produced gets one written
    answer (" <option>.", or " something else." for other), which the report names."""
    saved = reference(layout)
    found: list[list[str]] = [[] for _ in range(len(config.options) + 1)]
    for text, kind in zip(saved["completions"], saved["types"], strict=True):
        found[kind].append(text)
    written = [f" {o}." for o in config.options] + [" something else."]
    return [texts or [written[k]] for k, texts in enumerate(found)]


def label_pairs(config: ChoiceConfig, layout: ChoiceLayout, value: float, k: int) -> dict[str, Any]:
    """``pairs`` pairs: both types drawn from the cell's pair distribution, a reference
    completion of each, one annotator drawn by share who prefers the type it ranks higher,
    except with probability ``noise`` (a coin between two of one type); two identical texts
    are drawn again.  Seed ``seed + k`` draws its own pairs and annotators."""
    cell = cell_prediction(layout, value)
    rng = np.random.default_rng([config.seed + k, round(value * 1e6)])
    by_type, text = pools(config, layout), question(layout)["text"]
    places = [np.argsort(r) for r in cell["rankings"]]
    rows, kinds = [], []
    for _ in range(100 * config.pairs):  # identical texts make no pair: drawn again
        if len(rows) == config.pairs:
            break
        i, j = (int(k) for k in rng.choice(len(by_type), size=2, p=cell["pairs"]))
        a = by_type[i][rng.integers(len(by_type[i]))]
        b = by_type[j][rng.integers(len(by_type[j]))]
        if a.strip() == b.strip():
            continue
        g = int(rng.choice(len(places), p=cell["shares"]))
        if i == j:
            first = bool(rng.random() < 0.5)
        else:
            first = bool(places[g][i] < places[g][j]) != bool(rng.random() < config.noise)
        chosen, rejected = (a, b) if first else (b, a)
        kinds += [i, j]
        rows.append(
            {
                "prompt": text,
                "chosen": chosen,
                "rejected": rejected,
                "weight": 1.0,
                "source": "population",
                "labeler": f"voter type {g}",
            }
        )
    folder = RunFolder(layout.cell(value, k))
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    atomic_write_text(folder.root / "pairs.jsonl", body)
    return {"pairs": len(rows), "types": np.bincount(kinds, minlength=4).tolist()}


def label_wins(config: ChoiceConfig, layout: ChoiceLayout, value: float, k: int) -> np.ndarray:
    """``wins[i, j]``: how often the labels of the cell's run from seed ``seed + k`` chose a
    completion of type i over one of type j (pairs of one type left out)."""
    n = len(config.options) + 1
    wins = np.zeros((n, n), dtype=np.int64)
    with (layout.cell(value, k) / "pairs.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            i = completion_type(row["chosen"], config.options)
            j = completion_type(row["rejected"], config.options)
            if i != j:
                wins[i, j] += 1
    return wins


def train_route(
    config: ChoiceConfig, layout: ChoiceLayout, value: float, route: str, k: int
) -> dict[str, Any]:
    """One route of one cell from seed ``seed + k`` (it resumes from its own checkpoints)."""
    cell = cell_prediction(layout, value)
    folder = RunFolder(layout.cell(value, k))
    cfg = route_configs(config.for_seed(k), folder, cell["prediction"]["beta"])[route]
    judge: Any = None  # the learned routes load theirs from cfg.judge
    if route == "ppo-exact":
        judge = TypeReward(cell["prediction"]["reward"], config.options)
    elif route == "nash-md-exact":
        judge = TypePreference(np.array(cell["P"]), config.options)
    trainer = Trainer(cfg, judge=judge, prompts=[question(layout)["text"]])
    if route.startswith("ppo"):
        ppo.train(trainer, cfg)
    elif route.startswith("nash-md"):
        trainer.run(NashMDPG(trainer, cfg), "nash-md")
    else:
        trainer.run(OnlineDPO(trainer, cfg), "online-ipo")
    rows = read_metrics(folder.policy(route) / "metrics.jsonl")
    return {
        "steps": int(rows[-1]["step"]) if rows else 0,
        "comparisons": len(rows) * cfg.batch_size,
        "training_seconds": sum(r.get("step_seconds", 0.0) for r in rows),
        "kl": tail_mean(rows, "kl") if rows else None,
    }


@torch.no_grad()
def read_judges(config: ChoiceConfig, layout: ChoiceLayout, folder: RunFolder) -> dict[str, Any]:
    """The learned judges per type, on up to :data:`JUDGE_PROBES` reference completions of
    each: the reward model's mean score (centred) and the preference model's mean P."""
    probes = [texts[:JUDGE_PROBES] for texts in pools(config, layout)]
    text = question(layout)["text"]
    options = JudgeOptions(max_length=config.judge_max_length, cache=False)
    found: dict[str, Any] = {}
    kinds = set(LEARNED_JUDGE[r] for r in config.routes if r in LEARNED_JUDGE)
    if "reward-model" in kinds:
        rm = load_judge(str(folder.judge("reward-model") / "model"), options)
        scores = [float(rm.scores([text] * len(p), p).double().mean()) for p in probes]
        found["reward"] = (np.array(scores) - np.mean(scores)).tolist()
    if "preference-model" in kinds:
        pm = load_judge(str(folder.judge("preference-model") / "model"), options)
        k = len(probes)
        P = np.full((k, k), 0.5)
        for i in range(k):
            for j in range(k):
                if i != j:
                    a = [x for x in probes[i] for _ in probes[j]]
                    b = [y for _ in probes[i] for y in probes[j]]
                    P[i, j] = float(pm([text] * len(a), a, b).double().mean())
        found["preference"] = ((P + 1.0 - P.T) / 2.0).tolist()  # made antisymmetric
    return found


def measure(config: ChoiceConfig, layout: ChoiceLayout, value: float, k: int) -> dict[str, Any]:
    """``measure_samples`` completions of every policy of the cell's run from seed
    ``seed + k``: their types (their KL is the one their training logged); the learned judges
    read per type.  A policy trained in an earlier cell (the exact Nash control) keeps that
    cell's measurement: its samples are seeded by its name, so they would be the same."""
    folder = RunFolder(layout.cell(value, k))
    own = [r for r in config.routes if trained_in(config, value, r) == value]
    policies = {}
    if own:
        specs = [f"{r}={policy_folder(config, layout, value, r, k) / 'policy'}" for r in own]
        entrants, ref_path = parse_entrants(
            specs if len(specs) > 1 else [*specs, "reference"], config.policy
        )
        settings = sampling_of(config.for_seed(k), config.measure_samples, batch_size=COUNT_BATCH)
        sampled = sample_entrants(  # the KL is training's: decoding μ too would double the work
            entrants, ref_path, [question(layout)["text"]], settings, config.progress, kl=False
        )
        for c in sampled:
            if c.name not in own:
                continue
            texts = c.texts[0]
            policies[c.name] = {
                "counts": type_counts(texts, config.options).tolist(),
                "examples": texts[:8],
            }
    for r in config.routes:
        if r not in own:
            policies[r] = measurement(layout, trained_in(config, value, r), k)["policies"][r]
    policies = {r: policies[r] for r in config.routes}
    result = {"policies": policies, "judges": read_judges(config, layout, folder)}
    atomic_write_json(folder.root / "measurement.json", result)
    return {name: p["counts"] for name, p in policies.items()}


def measurement(layout: ChoiceLayout, value: float, k: int) -> dict[str, Any]:
    return json.loads((layout.cell(value, k) / "measurement.json").read_text())


def seed_suffix(k: int) -> str:
    """What the stages and rows of seed ``seed + k`` add to their names."""
    return f" seed{k}" if k else ""


def stages(config: ChoiceConfig, layout: ChoiceLayout) -> Stages:
    """The question and the reference, every cell's prediction, then each cell in turn, seed
    after seed (every cell of the first seed before the second seed's)."""
    learned = any(r in LEARNED_JUDGE for r in config.routes)
    found: Stages = {
        "question": lambda: write_question(config, layout),
        "reference types": lambda: sample_reference(config, layout),
        "predictions": lambda: write_predictions(config, layout),
    }
    for k in range(config.seeds):
        for v in config.cells:
            name = cell_name(config, v) + seed_suffix(k)
            found[f"labels {name}"] = lambda v=v, k=k: label_pairs(config, layout, v, k)
            if learned:
                judges = cell_judge_configs(config.for_seed(k), RunFolder(layout.cell(v, k)))
                found[f"judges {name}"] = lambda judges=judges: train_judges(judges)
            for r in config.routes:
                if trained_in(config, v, r) == v:  # else an earlier cell's run serves this one
                    found[f"train {r} {name}"] = lambda v=v, r=r, k=k: train_route(
                        config, layout, v, r, k
                    )
            found[f"measure {name}"] = lambda v=v, k=k: measure(config, layout, v, k)
    return found
