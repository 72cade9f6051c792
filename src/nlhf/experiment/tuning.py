"""The tuning stage of ``nlhf experiment population``: each route's settings, chosen the same way.

Before the routes train, short runs (``tune_steps`` steps, the routes' prompts per step) try a
small grid around the given options, one change at a time:

- PPO against the learned reward model: the learning rate ×3 and ÷3, 2 and 8 epochs per
  rollout, 4 mini-batches instead of 2, an initial KL coefficient of 0.2 (:data:`PPO_GRID`);
- Nash-MD-PG against the learned preference model: the learning rate ×½ and ×2
  (:data:`NASH_GRID`).

Every candidate samples completions of the validation prompts (disjoint from the training and
the held-out ones), and the candidate the population prefers most to the reference there
(P(candidate ≻ reference), the mean over prompts) gives its settings to the route and to the
route's exact-population control.  A candidate the batch cannot take (mini-batches that do
not divide the prompts per step) is left out.  PPO gets more candidates than Nash-MD-PG, so
it is tuned at least as carefully.  ``tuning.json`` keeps every candidate's settings and
estimate.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from nlhf.experiment.config import Config, Layout
from nlhf.experiment.exact_population import load_population
from nlhf.experiment.plan import prompt_texts, route_configs
from nlhf.files import atomic_write_json
from nlhf.lm_stages import tournament
from nlhf.train import nash_md, ppo

PPO_GRID: dict[str, dict[str, float]] = {
    "given": {},
    "lr ×3": {"lr": 3.0},
    "lr ÷3": {"lr": 1 / 3},
    "2 epochs": {"epochs": 2},
    "8 epochs": {"epochs": 8},
    "4 mini-batches": {"mini_batches": 4},
    "KL coef 0.2": {"init_kl_coef": 0.2},
}
"""PPO's candidates: ``lr`` multiplies the given learning rate, the rest replace a field."""

NASH_GRID: dict[str, dict[str, float]] = {"given": {}, "lr ×½": {"lr": 0.5}, "lr ×2": {"lr": 2.0}}
"""Nash-MD-PG's candidates (``lr`` multiplies the given learning rate)."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    route: str
    """``ppo`` or ``nash-md``: the route (and its control) that would take these settings."""
    label: str
    settings: dict[str, Any]
    """The trainer fields it changes, as values."""
    config: Any
    """Its trainer config: the route's, changed, for ``tune_steps`` steps."""


def settings(base: Any, change: dict[str, float]) -> dict[str, Any]:
    """The trainer fields one grid entry changes, as values (``lr`` as a multiple)."""
    return {k: base.lr * v if k == "lr" else type(getattr(base, k))(v) for k, v in change.items()}


def candidates(config: Config, layout: Layout) -> list[Candidate]:
    """Every candidate run, PPO's then Nash-MD-PG's."""
    routes = route_configs(config, layout)
    found = []
    for route, grid in (("ppo", PPO_GRID), ("nash-md", NASH_GRID)):
        base = routes[route]
        for n, (label, change) in enumerate(grid.items()):
            changed = settings(base, change)
            if config.batch_size % changed.get("mini_batches", 1):
                continue
            cfg = dataclasses.replace(
                base,
                **changed,
                steps=config.tune_steps,
                out=str(layout.tuning_run(f"{route}-{n}")),
                checkpoint_every=config.tune_steps,
            )
            found.append(Candidate(route, label, changed, cfg))
    return found


def tune(config: Config, layout: Layout) -> dict[str, Any]:
    """Train every candidate (each resumes from its checkpoints), compare them with the
    reference under the population on the validation prompts, write ``tuning.json``."""
    runs = candidates(config, layout)
    for c in runs:
        if not (Path(c.config.out) / "policy").is_dir():
            (ppo.run if c.route == "ppo" else nash_md.run)(c.config)
    result = tournament(
        config,
        ["reference"] + [f"{Path(c.config.out).name}={c.config.out}/policy" for c in runs],
        prompt_texts(layout.tune_prompts),
        {"population": load_population(config)},
        TUNE_SAMPLES,
        show_samples=0,
    )
    rates = result.win_rates["population"]
    routes: dict[str, Any] = {"ppo": {"candidates": {}}, "nash-md": {"candidates": {}}}
    for k, c in enumerate(runs, start=1):
        routes[c.route]["candidates"][c.label] = {
            "settings": c.settings,
            "vs_reference": {
                "mean": float(rates.mean[k, 0]),
                "low": float(rates.low[k, 0]),
                "high": float(rates.high[k, 0]),
            },
        }
    for entry in routes.values():
        found = entry["candidates"]
        best = max(found, key=lambda label: found[label]["vs_reference"]["mean"])
        entry |= {"chosen": best, "settings": found[best]["settings"]}
    saved = {
        "steps": config.tune_steps,
        "prompts": len(result.prompts),
        "samples_per_prompt": TUNE_SAMPLES,
        "routes": routes,
    }
    atomic_write_json(layout.tuning, saved)
    return {route: entry["chosen"] for route, entry in routes.items()}


TUNE_SAMPLES = 2
"""Completions per validation prompt and candidate."""


def tuned_settings(layout: Layout) -> dict[str, dict[str, Any]]:
    """{"ppo": fields, "nash-md": fields} the tuning stage chose ({} when it has not run)."""
    if not layout.tuning.exists():
        return {}
    routes = json.loads(layout.tuning.read_text())["routes"]
    return {route: entry["settings"] for route, entry in routes.items()}
