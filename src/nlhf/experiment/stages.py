"""The stages of ``nlhf experiment population`` in order (:func:`stages`), each one
idempotent: a finished stage is skipped, an interrupted one starts again (the trainers continue
from their checkpoints).  The trainer configs they run are :mod:`nlhf.experiment.plan`'s.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from nlhf.assets import resolve_model
from nlhf.errors import UserError
from nlhf.eval.rollouts import Sampling, sample_policy, spec_salt
from nlhf.eval.stats import mean_interval
from nlhf.experiment.analysis import (
    accuracy,
    bradley_terry_majority,
    criterion_shift,
    cyclic_triples,
    pairs_in_cycles,
    restricted_game,
)
from nlhf.experiment.config import POLICIES, TIMED, Config, Layout
from nlhf.experiment.exact_population import (
    AnchoredBradleyTerry,
    CriterionJudge,
    criterion_scores,
    exact_matrix,
    load_population,
)
from nlhf.experiment.plan import pair_judge_configs, prompt_texts, route_configs
from nlhf.experiment.tuning import tune, tuned_settings
from nlhf.files import atomic_write_json, atomic_write_text
from nlhf.lm_stages import tournament, train_judges, write_prompts
from nlhf.models.judges import JudgeOptions, load_judge
from nlhf.models.judges.population import PopulationJudge
from nlhf.models.lm import load_causal_lm
from nlhf.reporting import read_metrics
from nlhf.resumable import Stages
from nlhf.train import nash_md, ppo
from nlhf.train.online import Trainer
from nlhf.train.pairs import load_training_pairs


def reference_completions(layout: Layout) -> dict[str, dict[str, list[str]]]:
    """{"train"|"eval": {prompt: its reference completions}} from stage 2."""
    saved = json.loads(layout.completions.read_text())
    return {
        part: dict(zip(saved[part]["prompts"], saved[part]["completions"], strict=True))
        for part in ("train", "eval")
    }


# --------------------------------------------------------------------------- 1. data


def sample_reference(config: Config, layout: Layout) -> dict[str, Any]:
    """``samples`` reference completions of every training prompt and ``eval_samples`` of
    every held-out one, each from its own seeded generator."""
    torch.manual_seed(config.seed)
    model, tokenizer = load_causal_lm(resolve_model(config.policy, "policy"), config.dtype)
    parts = {
        "train": (prompt_texts(layout.train_prompts), config.samples),
        "eval": (prompt_texts(layout.eval_prompts), config.eval_samples),
    }
    total = sum(len(p) * k for p, k in parts.values())
    bar = tqdm(total=total, desc="reference", unit="completion", disable=not config.progress)
    saved = {}
    for part, (prompts, k) in parts.items():
        settings = Sampling(
            samples_per_prompt=k,
            max_new_tokens=config.max_new_tokens,
            batch_size=64,
            seed=config.seed,
            dtype=config.dtype,
        )
        out = sample_policy(
            model, tokenizer, prompts, settings, spec_salt(f"experiment:{part}"),
            measure_kl=False, advance=bar.update,
        )  # fmt: skip
        saved[part] = {"prompts": prompts, "completions": out.texts}
    bar.close()
    atomic_write_json(layout.completions, saved)
    return {"completions": total}


def label_pairs(config: Config, layout: Layout) -> dict[str, Any]:
    """Every pair of distinct, non-empty reference completions of each training prompt,
    ``annotators`` drawn from the population per pair (a row each); ``pairs.jsonl`` in the
    schema of ``nlhf label export``."""
    population = load_population(config)
    prompts, a, b = [], [], []
    for prompt, texts in reference_completions(layout)["train"].items():
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                x, y = texts[i], texts[j]
                if x.strip() and y.strip() and x.strip() != y.strip():
                    prompts.append(prompt), a.append(x), b.append(y)
    if len(set(prompts)) < 2:
        raise UserError(
            f"only {len(prompts)} distinct pairs of reference completions: too few to train "
            "judges on (raise train_prompts or max_new_tokens)"
        )
    rows = population.sample_labels(
        prompts, a, b, random.Random(config.seed), annotators=config.annotators
    )
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    atomic_write_text(layout.pairs, text)
    groups: dict[str, int] = {}
    for row in rows:
        groups[row["labeler"]] = groups.get(row["labeler"], 0) + 1
    return {"pairs": len(rows), "labels_by_group": groups}


# --------------------------------------------------------------------------- 1. judges


def _position(texts: list[str], text: str) -> int:
    """Where ``text`` (as the pair loader read it back) is among a prompt's completions."""
    if text in texts:
        return texts.index(text)
    return [t.strip() for t in texts].index(text.strip())


def evaluate_judges(config: Config, layout: Layout) -> dict[str, Any]:
    """Held-out accuracy of each judge against the held-out labels, against the population's
    exact majority, and on the held-out pairs that lie in a cyclic triple of their prompt's
    completions; beside them the exact P and its per-prompt Bradley–Terry fit."""
    population = load_population(config)
    configs = pair_judge_configs(config, layout)
    _, held = load_training_pairs(configs["reward-model"], config.seed)
    train = reference_completions(layout)["train"]
    # queried with the prompt as the policy trainers pass it (the judge trainers render it as
    # a chat turn, "Human: …\n\nAssistant:")
    prompts = [str(p.prompt) for p in held]
    index, exact, fitted, majority, cyclic = [], [], [], [], []
    games: dict[str, tuple[np.ndarray, np.ndarray, set]] = {}
    for pair, prompt in zip(held, prompts, strict=True):
        texts = train[prompt]
        if prompt not in games:
            P = exact_matrix(population, prompt, texts)
            games[prompt] = (P, bradley_terry_majority(P), pairs_in_cycles(P))
        P, bt, cycles = games[prompt]
        i, j = _position(texts, pair.chosen), _position(texts, pair.rejected)
        index.append((i, j))
        exact.append(P[i, j])
        fitted.append(1.0 if bt[i, j] else 0.0 if bt[j, i] else 0.5)
        majority.append(P[i, j] > 0.5)
        cyclic.append((min(i, j), max(i, j)) in cycles)
    exact, majority, cyclic = np.array(exact), np.array(majority), np.array(cyclic, dtype=bool)
    decided = exact != 0.5
    labels = np.ones(len(held), dtype=bool)  # the chosen response is the first one
    options = JudgeOptions(max_length=config.judge_max_length, cache=False)
    chosen, rejected = [p.chosen for p in held], [p.rejected for p in held]
    predictions = {}
    for kind in configs:
        judge = load_judge(str(layout.judge(kind) / "model"), options)
        predictions[kind] = judge(prompts, chosen, rejected).double().numpy()
    predictions["exact population P"] = exact
    predictions["Bradley–Terry fit of the exact P"] = np.array(fitted)
    rows = {}
    for name, p in predictions.items():
        rows[name] = {
            "labels": accuracy(p, labels).as_dict(),
            "majority": accuracy(p[decided], majority[decided]).as_dict(),
            "cyclic_majority": accuracy(p[decided & cyclic], majority[decided & cyclic]).as_dict(),
        }
    cycles = [cyclic_triples(P) for P, _, _ in games.values()]
    result = {
        "held_out_pairs": len(held),
        "held_out_prompts": len(games),
        "pairs_in_cycles": int(cyclic.sum()),
        "label_agrees_with_majority": accuracy(majority.astype(float), labels).as_dict(),
        "cyclic_triples": sum(c for c, _ in cycles),
        "triples": sum(t for _, t in cycles),
        "judges": rows,
    }
    atomic_write_json(layout.judge_evaluation, result)
    return {"pairs_in_cycles": result["pairs_in_cycles"]}


# --------------------------------------------------------------------------- 2. prediction


def predict(config: Config, layout: Layout) -> dict[str, Any]:
    """The restricted game of every held-out prompt's K reference completions under the exact
    P: P(π* ≻ π_RLHF), each against the reference, the criteria each favours; and the share of
    cyclic triples among the training and held-out reference completions."""
    population = load_population(config)
    completions = reference_completions(layout)
    vs, nash_ref, rlhf_ref, equal_kl, kls = [], [], [], [], []
    shifts: dict[str, list[np.ndarray]] = {"nash": [], "rlhf": []}
    counts = {"train": [0, 0, 0], "eval": [0, 0, 0]}  # cyclic triples, triples, prompts with one
    for part, by_prompt in completions.items():
        for prompt, texts in by_prompt.items():
            P = exact_matrix(population, prompt, texts)
            c, t = cyclic_triples(P)
            counts[part] = [counts[part][0] + c, counts[part][1] + t, counts[part][2] + (c > 0)]
            if part != "eval":
                continue
            try:
                game = restricted_game(P, config.tau)
            except RuntimeError as exc:
                raise UserError(f"the restricted game at tau={config.tau}: {exc}") from None
            vs.append(game.nash_vs_rlhf)
            nash_ref.append(game.nash_vs_reference)
            rlhf_ref.append(game.rlhf_vs_reference)
            equal_kl.append(game.nash_vs_rlhf_equal_kl)
            kls.append((game.nash_kl, game.rlhf_kl))
            scores = criterion_scores(population, [prompt] * len(texts), texts)
            shifts["nash"].append(criterion_shift(game.nash, scores))
            shifts["rlhf"].append(criterion_shift(game.rlhf, scores))
    unit = (0.0, 1.0)
    groups = [g.name for g in population.groups]
    result = {
        "tau": config.tau,
        "K": config.eval_samples,
        "prompts": len(vs),
        "nash_vs_rlhf": mean_interval(np.array(vs), bounds=unit).as_dict(),
        "nash_vs_reference": mean_interval(np.array(nash_ref), bounds=unit).as_dict(),
        "rlhf_vs_reference": mean_interval(np.array(rlhf_ref), bounds=unit).as_dict(),
        "nash_vs_rlhf_equal_kl": mean_interval(np.array(equal_kl), bounds=unit).as_dict(),
        "nash_kl": mean_interval(np.array([a for a, _ in kls])).as_dict(),
        "rlhf_kl": mean_interval(np.array([b for _, b in kls])).as_dict(),
        "criterion_shift": {
            who: {
                g: mean_interval(np.array([s[k] for s in rows])).as_dict()
                for k, g in enumerate(groups)
            }
            for who, rows in shifts.items()
        },
        "cycles": {
            part: {"cyclic": c, "triples": t, "prompts_with_a_cycle": n, "prompts": len(by)}
            for (part, (c, t, n)), by in zip(counts.items(), completions.values(), strict=True)
        },
    }
    atomic_write_json(layout.prediction, result)
    return {"nash_vs_rlhf": result["nash_vs_rlhf"]["mean"]}


# --------------------------------------------------------------------------- 3. policies


MAX_TIMED_FACTOR = 8
"""The equal-time route takes at most this many times the Nash-MD-PG route's steps."""


def timed_steps(stages: dict[str, Any]) -> int:
    """Nash-MD-PG steps that fit in PPO's training seconds, at the Nash-MD-PG route's measured
    seconds per step (both read from the finished stages, so a resumed run keeps the count)."""
    ppo, nash = stages["train ppo"], stages["train nash-md"]
    per_step = nash["training_seconds"] / max(1, nash["steps"])
    steps = round(ppo["training_seconds"] / per_step) if per_step > 0 else nash["steps"]
    return int(min(max(1, steps), MAX_TIMED_FACTOR * max(1, nash["steps"])))


def timed_config(config: Config, layout: Layout) -> Any:
    """The Nash-MD-PG route's config with the equal-time step count and its own folder."""
    cfg = route_configs(config, layout, tuned_settings(layout))["nash-md"]
    steps = timed_steps(layout.finished())
    return dataclasses.replace(cfg, steps=steps, out=str(layout.policy(TIMED)))


def train_route(config: Config, layout: Layout, route: str) -> dict[str, Any]:
    """One route's trainer, which resumes from its own checkpoints."""
    if route == TIMED:
        cfg = timed_config(config, layout)
    else:
        cfg = route_configs(config, layout, tuned_settings(layout))[route]
    if route == "ppo-exact":
        anchors = reference_completions(layout)["train"]
        trainer = Trainer(cfg, judge=AnchoredBradleyTerry(load_population(config), anchors))
        ppo.train(trainer, cfg)
    elif route.startswith("ppo"):
        ppo.run(cfg)
    else:
        nash_md.run(cfg)
    rows = read_metrics(Path(cfg.out) / "metrics.jsonl")
    return {
        "steps": rows[-1]["step"] if rows else 0,
        "comparisons": len(rows) * cfg.batch_size,
        "training_seconds": sum(r.get("step_seconds", 0.0) for r in rows),
    }


# --------------------------------------------------------------------------- 4. tournament


def tournament_judges(population: PopulationJudge) -> dict[str, Any]:
    """The population (the ground truth) and each of its groups' criteria alone."""
    return {
        "population": population,
        **{f"only {g.name}": CriterionJudge(g) for g in population.groups},
    }


def run_tournament(config: Config, layout: Layout) -> dict[str, Any]:
    """Reference and the five policies on the held-out prompts, every pair of samples judged."""
    result = tournament(
        config,
        ["reference"] + [f"{r}={layout.policy(r) / 'policy'}" for r in POLICIES],
        prompt_texts(layout.eval_prompts),
        tournament_judges(load_population(config)),
        config.tournament_samples,
        show_samples=3,
        out=layout.tournament,
    )
    return {"seconds_inside": result.seconds}


def stages(config: Config, layout: Layout) -> Stages:
    """Disjoint IMDB openings (held out: the prediction and the tournament; the judges' pairs and
    the policies' training; the tuning stage's validation), then every stage above in order."""
    prompts = {
        layout.eval_prompts: config.eval_prompts,
        layout.train_prompts: config.train_prompts,
        layout.tune_prompts: config.tune_prompts,
    }
    return {
        "prompts": lambda: write_prompts(config.seed, prompts),
        "reference completions": lambda: sample_reference(config, layout),
        "labels": lambda: label_pairs(config, layout),
        "judges": lambda: train_judges(pair_judge_configs(config, layout)),
        "judge evaluation": lambda: evaluate_judges(config, layout),
        "prediction": lambda: predict(config, layout),
        **({"tuning": lambda: tune(config, layout)} if config.tune else {}),
        **{f"train {r}": lambda r=r: train_route(config, layout, r) for r in POLICIES},
        "tournament": lambda: run_tournament(config, layout),
    }
